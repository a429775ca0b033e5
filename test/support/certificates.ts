// Certificates made by the test itself with the machine's openssl: a CA, and server
// certificates it signs for 127.0.0.1 and localhost. Nothing is read from outside.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface Issued {
  certPath: string;
  keyPath: string;
  cert: string;
  /** The certificate's serial number as Node reports it (uppercase hex). */
  serial: string;
}

export interface TestCa {
  dir: string;
  caPath: string;
  ca: string;
  /** A certificate for 127.0.0.1 and localhost (subject CN `commonName`), signed by this CA, in its own files. */
  issue(name: string, commonName?: string): Issued;
}

const openssl = (dir: string, args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });

export function makeTestCa(commonName = 'statelog test CA'): TestCa {
  const dir = mkdtempSync(join(tmpdir(), 'statelog-tls-'));
  openssl(dir, ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '2',
    '-subj', `/CN=${commonName}`, '-keyout', 'ca.key', '-out', 'ca.pem']);
  writeFileSync(join(dir, 'san.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n');
  let serial = 0x1000;
  return {
    dir,
    caPath: join(dir, 'ca.pem'),
    ca: readFileSync(join(dir, 'ca.pem'), 'utf8'),
    issue(name, commonName = 'localhost') {
      serial += 1;
      openssl(dir, ['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-subj', `/CN=${commonName}`,
        '-keyout', `${name}.key`, '-out', `${name}.csr`]);
      openssl(dir, ['x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key', '-set_serial', String(serial),
        '-days', '2', '-extfile', 'san.ext', '-out', `${name}.pem`]);
      return {
        certPath: join(dir, `${name}.pem`),
        keyPath: join(dir, `${name}.key`),
        cert: readFileSync(join(dir, `${name}.pem`), 'utf8'),
        serial: serial.toString(16).toUpperCase(),
      };
    },
  };
}
