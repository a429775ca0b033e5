// The files of a connection's TLS options, read for the command's client: the CA of a
// private server, and a client certificate with its key.
import { readFileSync } from 'node:fs';

export interface TlsFlags {
  ca?: string;
  cert?: string;
  key?: string;
}

/** The files' contents by option; `usage` stops the command with one line for a file that cannot be read. */
export function readTlsFlags(flags: TlsFlags, usage: (message: string) => never): { ca?: Buffer; cert?: Buffer; key?: Buffer } {
  if (!flags.cert !== !flags.key) usage('give --cert and --key together');
  const read: { ca?: Buffer; cert?: Buffer; key?: Buffer } = {};
  for (const name of ['ca', 'cert', 'key'] as const) {
    const file = flags[name];
    // An empty STATELOG_CA (and the like) counts as unset, as shells leave such variables.
    if (!file) continue;
    try {
      read[name] = readFileSync(file);
    } catch (err) {
      usage(`cannot read --${name} ${file} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
    }
  }
  return read;
}
