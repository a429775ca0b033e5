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
  /** A server certificate valid only between these times (openssl's YYYYMMDDHHMMSSZ), for certificates out of their dates. */
  issueBetween(name: string, notBefore: string, notAfter: string): Issued;
}

const openssl = (dir: string, args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });

export function makeTestCa(commonName = 'statelog test CA'): TestCa {
  const dir = mkdtempSync(join(tmpdir(), 'statelog-tls-'));
  openssl(dir, ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '2',
    '-subj', `/CN=${commonName}`, '-keyout', 'ca.key', '-out', 'ca.pem']);
  writeFileSync(join(dir, 'san.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n');
  let serial = 0x1000;
  // `openssl ca`, unlike `x509 -req`, takes a start and an end date (OpenSSL 3.0 has no -not_before).
  writeFileSync(join(dir, 'ca.cnf'), [
    '[ca]', 'default_ca = test', '[test]', 'database = index.txt', 'serial = serial', 'new_certs_dir = .', 'default_md = sha256',
    'policy = any', 'unique_subject = no', '[any]', 'commonName = supplied', '',
  ].join('\n'));
  writeFileSync(join(dir, 'index.txt'), '');
  const files = (name: string): Issued => ({
    certPath: join(dir, `${name}.pem`),
    keyPath: join(dir, `${name}.key`),
    cert: readFileSync(join(dir, `${name}.pem`), 'utf8'),
    serial: serial.toString(16).toUpperCase(),
  });
  const request = (name: string, commonName = 'localhost') =>
    openssl(dir, ['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-subj', `/CN=${commonName}`,
      '-keyout', `${name}.key`, '-out', `${name}.csr`]);
  return {
    dir,
    caPath: join(dir, 'ca.pem'),
    ca: readFileSync(join(dir, 'ca.pem'), 'utf8'),
    issue(name, commonName = 'localhost') {
      serial += 1;
      request(name, commonName);
      openssl(dir, ['x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key', '-set_serial', String(serial),
        '-days', '2', '-extfile', 'san.ext', '-out', `${name}.pem`]);
      return files(name);
    },
    issueBetween(name, notBefore, notAfter) {
      serial += 1;
      request(name);
      writeFileSync(join(dir, 'serial'), `${serial.toString(16).padStart(4, '0')}\n`);
      openssl(dir, ['ca', '-batch', '-config', 'ca.cnf', '-cert', 'ca.pem', '-keyfile', 'ca.key', '-in', `${name}.csr`, '-out', `${name}.pem`,
        '-notext', '-startdate', notBefore, '-enddate', notAfter, '-extfile', 'san.ext']);
      return files(name);
    },
  };
}
