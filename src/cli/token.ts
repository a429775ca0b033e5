// `statelog token new`: a fresh random secret, printed once, and the token-file entry
// that holds only its SHA-256 (STATELOG_TOKENS_FILE), ready to add to the file.
import { createHash, randomBytes } from 'node:crypto';
import { type Command, CommanderError } from 'commander';
import { parseTokenFile, ROLES, type Role } from '../token-file.js';

/** A secret of 32 random bytes, URL-safe: as strong as the digest that stands for it. */
export function newSecret(): string {
  return `sl_${randomBytes(32).toString('base64url')}`;
}

export function tokenEntry(secret: string, name: string, role: Role, prefixes: string[]): Record<string, unknown> {
  const sha256 = createHash('sha256').update(secret, 'utf8').digest('hex');
  return { name, sha256, role, ...(prefixes.length > 0 ? { prefixes } : {}) };
}

const collect = (value: string, previous: string[]): string[] => [...previous, value];

export function addTokenCommand(program: Command): void {
  const token = program.command('token').description('make entries of a token file (STATELOG_TOKENS_FILE)');
  token
    .command('new')
    .description('print a new random secret (shown this once) and its token-file entry, which holds only its SHA-256')
    .requiredOption('--name <name>', 'the entry\'s name: in the access log, and a client certificate\'s CN')
    .requiredOption('--role <role>', 'read, write or admin')
    .option('--prefix <prefix>', 'a key prefix the token is limited to (repeat for several; none: every key)', collect, [])
    .action((flags: { name: string; role: string; prefix: string[] }) => {
      if (!ROLES.includes(flags.role as Role)) throw new CommanderError(2, 'statelog.role', `--role must be read, write or admin, not "${flags.role}"`);
      const secret = newSecret();
      const entry = tokenEntry(secret, flags.name, flags.role as Role, flags.prefix);
      try {
        // The same checks as the server's, so that an entry printed here is one it takes.
        parseTokenFile(JSON.stringify([entry]));
      } catch (err) {
        throw new CommanderError(2, 'statelog.token', (err as Error).message);
      }
      process.stderr.write('the secret (shown once; give it to the client as its bearer token):\n');
      process.stdout.write(`${secret}\n`);
      process.stderr.write('the entry to add to the token file (send the server SIGHUP to load it):\n');
      process.stdout.write(`${JSON.stringify(entry)}\n`);
    });
}
