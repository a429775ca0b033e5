// The files of a connection's TLS options, read for the command's client: the CA of a
// private server, and a client certificate with its key. The key's option is --cert-key,
// as `tail --key` already names a key of the log.
import { readFileSync } from 'node:fs';

export interface TlsFlags {
  ca?: string | undefined;
  cert?: string | undefined;
  certKey?: string | undefined;
}

const OPTION = { ca: '--ca', cert: '--cert', certKey: '--cert-key' } as const;

/** The files' contents, as the client takes them; `usage` stops the command with one line for a file that cannot be read. */
export function readTlsFlags(flags: TlsFlags, usage: (message: string) => never): { ca?: Buffer; cert?: Buffer; key?: Buffer } {
  if (!flags.cert !== !flags.certKey) usage('give --cert and --cert-key together');
  const read: { ca?: Buffer; cert?: Buffer; key?: Buffer } = {};
  for (const name of ['ca', 'cert', 'certKey'] as const) {
    const file = flags[name];
    // An empty STATELOG_CA (and the like) counts as unset, as shells leave such variables.
    if (!file) continue;
    try {
      read[name === 'certKey' ? 'key' : name] = readFileSync(file);
    } catch (err) {
      usage(`cannot read ${OPTION[name]} ${file} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
    }
  }
  return read;
}
