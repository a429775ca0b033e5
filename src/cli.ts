#!/usr/bin/env node
// The statelog command: run the server, read and write keys, take snapshots, watch
// changes, compact, back up or restore (through the server, or the SQLite file), and
// make token-file entries (cli/token.ts).
import { createWriteStream, existsSync, mkdtempSync, readFileSync, renameSync, rmSync, type WriteStream } from 'node:fs';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { Command, CommanderError, Option } from 'commander';
import { SingleBar, Presets } from 'cli-progress';
import { StatelogClient, StatelogError, type WatchEvent } from '@statelog/client';
import { backupDatabase, restoreDatabase } from './store/sqlite/backup.js';
import { readTlsFlags } from './cli/connection.js';
import { addTokenCommand } from './cli/token.js';
import { BackupError, LinesHash, loadBackup, readBackup, type BackupLimits } from './backup-file.js';

/** Exit codes, as `--help` lists them. */
const EXIT = { ok: 0, refused: 1, usage: 2, unreachable: 3 } as const;
const EXIT_HELP = `
Exit codes:
  0  done
  1  the server answered with an error (not found, failed condition, reset...),
     or a local file could not be read or written
  2  usage error (an unknown command or option, a bad value, a URL without http://)
  3  the server could not be reached, or did not answer in time
`;

/** A failure with its own line and exit code. */
class CliFailure extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super(message);
  }
}

const usage = (message: string): never => {
  throw new CliFailure(message, EXIT.usage);
};
const VERSION = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;

const program = new Command('statelog')
  .description('statelog: a key-value state service backed by a compacted log')
  .version(VERSION, '-V, --version', 'print the version')
  .addOption(new Option('--url <url>', 'server URL, with http:// or https://').env('STATELOG_URL').default('http://127.0.0.1:8080'))
  .addOption(new Option('--token <token>', 'bearer token').env('STATELOG_TOKEN'))
  .addOption(new Option('--ca <file>', 'PEM file of the CA that signed an https:// server\'s certificate').env('STATELOG_CA'))
  .addOption(new Option('--cert <file>', 'PEM client certificate, for a server that asks for one (its CN names a token entry)').env('STATELOG_CERT'))
  .addOption(new Option('--cert-key <file>', 'PEM private key of --cert').env('STATELOG_CERT_KEY'))
  .addHelpText('after', EXIT_HELP)
  .showHelpAfterError()
  .exitOverride();

/** The server's URL, refused with one line unless it is http(s)://host[:port][/path]. */
function serverUrl(): string {
  const { url } = program.opts<{ url: string }>();
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(url)) usage(`--url ${url} has no scheme: write http://${url} (or https://)`);
  let parsed: URL | undefined;
  try {
    parsed = new URL(url);
  } catch {
    usage(`--url ${url} is not a URL`);
  }
  if (parsed!.protocol !== 'http:' && parsed!.protocol !== 'https:') usage(`--url ${url}: statelog speaks http:// or https://`);
  return url.replace(/\/+$/, '');
}

function client(): StatelogClient {
  const { token, ca, cert, certKey } = program.opts<{ token?: string; ca?: string; cert?: string; certKey?: string }>();
  const url = serverUrl();
  // A person waits at the prompt: two quick retries, then the reason.
  return new StatelogClient({ url, ...(token ? { token } : {}), ...readTlsFlags({ ca, cert, certKey }, usage), retry: { retries: 2 } });
}

const print = (value: unknown) => process.stdout.write(`${JSON.stringify(value)}\n`);

/** Writes a line, waiting while the reader is behind (a pipe into a slow program). */
async function writeLine(out: NodeJS.WritableStream, line: string): Promise<void> {
  if (!out.write(`${line}\n`)) await once(out, 'drain');
}

function parseValue(text: string, asString: boolean): unknown {
  if (asString) return text;
  try {
    return JSON.parse(text);
  } catch {
    throw new CommanderError(2, 'statelog.value', `VALUE must be JSON (quote a string: '"text"') or use --string`);
  }
}

function offsetOption(text: string): number {
  if (!/^\d+$/.test(text)) throw new CommanderError(2, 'statelog.offset', `not an offset: ${text}`);
  return Number(text);
}

async function readStdin(): Promise<string> {
  let text = '';
  for await (const chunk of process.stdin) text += chunk;
  return text;
}

/** A file system error in a few words ("no such file or directory"), without Node's call details. */
function fsCause(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return message.replace(/^E[A-Z]+: /, '').replace(/, \w+ '.*'$/, '');
}

/** Opens FILE for writing, or fails with one line (exit 1) if it cannot be. */
async function openOut(file: string, shown = file): Promise<WriteStream> {
  const stream = createWriteStream(file);
  try {
    await once(stream, 'open');
  } catch (err) {
    throw new CliFailure(`cannot write ${shown}: ${fsCause(err)}`, EXIT.refused);
  }
  return stream;
}

async function closeOut(stream: WriteStream, file: string): Promise<void> {
  try {
    await new Promise<void>((resolve, reject) => {
      stream.once('error', reject);
      stream.end(() => resolve());
    });
  } catch (err) {
    throw new CliFailure(`cannot write ${file}: ${fsCause(err)}`, EXIT.refused);
  }
}

/** A progress bar on stderr when it is a terminal, else nothing. */
function progressBar(format: string): SingleBar | null {
  return process.stderr.isTTY ? new SingleBar({ format, stream: process.stderr, hideCursor: true }, Presets.shades_classic) : null;
}

addTokenCommand(program);

program
  .command('serve')
  .description('run the server (the same settings as npm start; flags override the environment)')
  .option('--port <port>', 'listen port (PORT)')
  .option('--host <host>', 'listen address (HOST)')
  .option('--db <file>', 'SQLite file (STATELOG_DB)')
  .option('--sync <mode>', 'full or normal (STATELOG_SYNC)')
  .option('--tokens <pairs>', 'role:token pairs (STATELOG_TOKENS)')
  .option('--log-level <level>', 'pino level (LOG_LEVEL)')
  .action(async (flags: Record<string, string | undefined>) => {
    const env: Record<string, string | undefined> = {
      PORT: flags.port,
      HOST: flags.host,
      STATELOG_DB: flags.db,
      STATELOG_SYNC: flags.sync,
      STATELOG_TOKENS: flags.tokens,
      LOG_LEVEL: flags.logLevel,
    };
    for (const [name, value] of Object.entries(env)) if (value !== undefined) process.env[name] = value;
    await import('./server.js');
  });

program
  .command('get <key>')
  .description('print a key\'s value as JSON (exit 1 if it has none)')
  .option('--full', 'print key, value, offset and ts')
  .action(async (key: string, flags: { full?: boolean }) => {
    const entry = await client().get(key);
    if (!entry) throw new StatelogError(404, 'not_found', `${key}: no live value`);
    print(flags.full ? entry : entry.value);
  });

program
  .command('put <key> [value]')
  .description('set a key to a JSON value (read from stdin when VALUE is - or missing)')
  .option('--string', 'store VALUE as a string instead of parsing it as JSON')
  .option('--if-match <offset>', 'only if the key\'s live record has this offset', offsetOption)
  .option('--if-absent', 'only if the key has no live value')
  .action(async (key: string, text: string | undefined, flags: { string?: boolean; ifMatch?: number; ifAbsent?: boolean }) => {
    const raw = text === undefined || text === '-' ? (await readStdin()).replace(/\n$/, '') : text;
    const written = await client().put(key, parseValue(raw, Boolean(flags.string)), {
      ...(flags.ifMatch !== undefined ? { ifMatch: flags.ifMatch } : {}),
      ...(flags.ifAbsent ? { ifNoneMatch: '*' as const } : {}),
    });
    print(written);
  });

program
  .command('del <key>')
  .description('delete a key (exit 1 if it has no live value)')
  .option('--if-match <offset>', 'only if the key\'s live record has this offset', offsetOption)
  .action(async (key: string, flags: { ifMatch?: number }) => {
    print(await client().delete(key, flags.ifMatch !== undefined ? { ifMatch: flags.ifMatch } : {}));
  });

program
  .command('history <key>')
  .description('print the key\'s records still in the log, newest first, one JSON line each')
  .option('--limit <n>', 'at most this many records (1 to 1000)', offsetOption, 100)
  .option('--before <offset>', 'only records below this offset (a previous run\'s "next")', offsetOption)
  .action(async (key: string, flags: { limit: number; before?: number }) => {
    const page = await client().history(key, { limit: flags.limit, ...(flags.before !== undefined ? { before: flags.before } : {}) });
    for (const record of page.records) print(record);
    if (page.next !== null) process.stderr.write(`more: --before ${page.next}\n`);
  });

program
  .command('ls')
  .description('list live keys in byte order, one JSON line each')
  .option('--prefix <prefix>', 'only keys with this prefix', '')
  .option('--keys-only', 'print only the keys')
  .action(async (flags: { prefix: string; keysOnly?: boolean }) => {
    for await (const entry of client().list({ prefix: flags.prefix })) {
      await writeLine(process.stdout, flags.keysOnly ? entry.key : JSON.stringify(entry));
    }
  });

program
  .command('incr <key> [by]')
  .description('add BY (default 1) to a number and print the result')
  .action(async (key: string, by: string | undefined) => {
    const amount = by === undefined ? 1 : Number(by);
    if (!Number.isFinite(amount)) throw new CommanderError(2, 'statelog.by', `not a number: ${by}`);
    print(await client().incr(key, amount));
  });

/**
 * Writes a snapshot (its entries as the server wrote them, then the trailer with the
 * epoch, the server's digest and a SHA-256 of the lines) to FILE, or stdout. A file is
 * written beside and renamed into place once the trailer checked out, so a cut
 * snapshot never passes for a whole one.
 */
async function writeSnapshot(prefix: string, file: string | undefined, label: string): Promise<{ count: number; offset: number; epoch: string }> {
  const api = client();
  const partial = file && `${file}.partial`;
  const out = partial ? await openOut(partial, file) : process.stdout;
  try {
    const total = prefix === '' && (label === 'backup' || (file && process.stderr.isTTY)) ? Number((await api.stats()).liveKeys) : 0;
    const snapshot = await api.snapshotLines({ prefix });
    const bar = file ? progressBar(`${label} [{bar}] {value}/{total} keys`) : null;
    bar?.start(Math.max(total, 1), 0);
    const lines = new LinesHash();
    for await (const line of snapshot) {
      lines.add(line);
      await writeLine(out, line);
      if (bar && snapshot.count > bar.getTotal()) bar.setTotal(snapshot.count);
      bar?.increment();
    }
    bar?.stop();
    const { offset, count, epoch, digest } = snapshot;
    await writeLine(out, JSON.stringify({ end: true, offset, count, epoch, ...(digest !== undefined ? { digest } : {}), sha256: lines.hex() }));
    if (partial) {
      await closeOut(out as WriteStream, file);
      renameSync(partial, file);
    }
    return { count: snapshot.count, offset: snapshot.offset, epoch: snapshot.epoch };
  } finally {
    if (partial && existsSync(partial)) rmSync(partial, { force: true });
  }
}

program
  .command('snapshot')
  .description('write a consistent snapshot as NDJSON (entries, then the trailer line)')
  .option('--prefix <prefix>', 'only keys with this prefix', '')
  .option('--out <file>', 'write to FILE instead of stdout')
  .action(async (flags: { prefix: string; out?: string }) => {
    const { count, offset } = await writeSnapshot(flags.prefix, flags.out, 'snapshot');
    process.stderr.write(`${count} keys at offset ${offset}\n`);
  });

/** One line per event of a watch: records as the stream gives them; the rest as small objects. */
function eventLine(event: WatchEvent): string | null {
  switch (event.type) {
    case 'record':
      return JSON.stringify(event.record);
    case 'initialized':
      return JSON.stringify({ initialized: true, offset: event.offset, epoch: event.epoch });
    case 'reset':
      return JSON.stringify({ reset: event.reason, message: event.error.message });
    case 'progress':
      return null;
  }
}

program
  .command('tail')
  .description('watch changes, one JSON line per record; reconnects and resumes until Ctrl-C')
  .option('--after <offset>', 'start after this offset (default: the head now)', offsetOption)
  .option('--snapshot', 'start with the live keys (then an {"initialized":true,...} line); after a reset, start again so')
  .option('--prefix <prefix>', 'only keys with this prefix')
  .option('--key <key>', 'only this key')
  .option('--once', 'end once the head of when it started is reached')
  .option('--until <offset>', 'end once this offset is reached', offsetOption)
  .addHelpText('after', `
Without --snapshot, a reset (the position was compacted away, or the log replaced)
ends it with exit 1 and the reason; with --snapshot it prints {"reset":...} and the
keys again.`)
  .action(async (flags: { after?: number; snapshot?: boolean; prefix?: string; key?: string; once?: boolean; until?: number }) => {
    if (flags.snapshot && flags.after !== undefined) usage('--snapshot starts at the snapshot\'s own offset: give no --after');
    if (flags.key !== undefined && flags.prefix !== undefined) usage('give --key or --prefix, not both');
    const api = client();
    // Also the first contact: a server that cannot be reached now is an error (exit 3), not a wait.
    const stats = (await api.stats()) as { head: number };
    const stop = flags.until ?? (flags.once ? stats.head : undefined);
    const done = (offset: number) => stop !== undefined && offset >= stop;
    const events = api.watch({
      ...(flags.prefix !== undefined ? { prefix: flags.prefix } : {}),
      ...(flags.key !== undefined ? { key: flags.key } : {}),
      ...(flags.snapshot ? {} : { after: flags.after ?? stats.head }),
      onRetry: (cause, delayMs) => process.stderr.write(`statelog: ${cause.message}; reconnecting in ${(delayMs / 1000).toFixed(1)} s\n`),
    });
    if (!flags.snapshot && done(flags.after ?? stats.head)) return;
    try {
      for await (const event of events) {
        // Without a snapshot, "initialized" only says the start offset was accepted.
        const line = event.type === 'initialized' && !flags.snapshot ? null : eventLine(event);
        if (line !== null) await writeLine(process.stdout, line);
        const offset = event.type === 'record' ? (event.snapshot ? -1 : event.record.offset) : event.type === 'reset' ? -1 : event.offset;
        if (done(offset)) break;
      }
    } catch (err) {
      if (err instanceof StatelogError && err.mustResnapshot) {
        throw new StatelogError(err.status, err.code, `${err.message} (tail --snapshot starts again from the keys)`, err.details);
      }
      throw err;
    }
  });

program
  .command('compact')
  .description('run a compaction now (admin token)')
  .action(async () => {
    print(await client().compact());
  });

program
  .command('stats')
  .description('print the log\'s statistics')
  .action(async () => {
    print(await client().stats());
  });

program
  .command('backup [file]')
  .description('save a consistent backup: through the server at --url (its snapshot with the trailer, from either store; a token without key prefixes), or with --db a copy of a SQLite file')
  .option('--out <file>', 'where the backup goes (or give FILE)')
  .option('--db <file>', 'copy this SQLite database file instead (SQLite backup API, safe while the server runs)')
  .action(async (positional: string | undefined, flags: { out?: string; db?: string }) => {
    const file = flags.out ?? positional;
    if (!file) usage('say where the backup goes: --out FILE');
    if (existsSync(file!)) throw new CliFailure(`${file} exists; choose a new file`, EXIT.refused);
    if (flags.db) {
      const bar = progressBar('backup [{bar}] {percentage}%');
      bar?.start(100, 0);
      const pages = await backupDatabase(flags.db, file!, (done, total) => bar?.update(Math.floor((done / total) * 100)));
      bar?.stop();
      process.stderr.write(`backed up ${pages} pages of ${flags.db} to ${file}\n`);
      return;
    }
    const { count, offset, epoch } = await writeSnapshot('', file, 'backup');
    process.stderr.write(`backed up ${count} keys at offset ${offset} (epoch ${epoch}) from ${serverUrl()} to ${file}\n`);
  });

program
  .command('restore <file>')
  .description('load a backup into an empty server at --url, in batches; or with --db replace a SQLite file, offline')
  .option('--force', 'load into a server that has keys: afterwards it holds exactly the backup\'s keys')
  .option('--db <file>', 'replace this SQLite database with a file made by backup --db (server stopped); the restored log gets a new epoch')
  .action(async (file: string, flags: { force?: boolean; db?: string }) => {
    if (flags.db) {
      const epoch = await restoreDatabase(file, flags.db);
      process.stderr.write(`restored ${file} to ${flags.db} with epoch ${epoch}\n`);
      return;
    }
    const api = client();
    const url = serverUrl();
    const stats = (await api.stats()) as { liveKeys: number; maxValueBytes?: number; maxBatchBytes?: number };
    const limits: BackupLimits = { maxValueBytes: stats.maxValueBytes ?? null, maxBatchBytes: stats.maxBatchBytes ?? null };
    // The whole file is checked, against itself and the server's limits, before anything is written.
    let total = 0;
    const check = readBackup(file, limits);
    for (let next = await check.next(); !next.done; next = await check.next()) total += 1;
    const live = stats.liveKeys;
    if (live > 0 && !flags.force) {
      throw new CliFailure(`${url} has ${live} live keys: restore loads into an empty server (--force to replace its keys)`, EXIT.refused);
    }
    // What the server holds now, so that a restore that fails midway can put it back.
    const before = live > 0 ? join(mkdtempSync(join(tmpdir(), 'statelog-restore-')), 'before.ndjson') : null;
    if (before) await writeSnapshot('', before, 'saving the server\'s keys first');
    const bar = progressBar('restore [{bar}] {percentage}% {value}/{total} keys');
    bar?.start(total, 0);
    let result;
    try {
      result = await loadBackup(api, file, limits, { replace: live > 0, progress: (items) => bar?.increment(items) });
    } catch (err) {
      bar?.stop();
      throw await putBack(api, before, limits, err);
    }
    bar?.stop();
    if (before) rmSync(dirname(before), { recursive: true, force: true });
    const epoch = ((await api.stats()) as { epoch?: string }).epoch;
    const extra = `${result.removed > 0 ? `, deleted ${result.removed} keys it did not have` : ''}${result.expired > 0 ? `, left out ${result.expired} keys past their expiry` : ''}`;
    process.stderr.write(`restored ${result.written} keys from ${file} to ${serverUrl()}${extra}; head ${result.offset}${epoch ? ` (epoch ${epoch})` : ''}\n`);
  });

/**
 * After a restore failed midway: makes the server hold again the keys it held before
 * (`before`, or none), and returns the error to report, saying whether that worked.
 */
async function putBack(api: StatelogClient, before: string | null, limits: BackupLimits, cause: unknown): Promise<Error> {
  const reason = cause instanceof Error ? cause.message : String(cause);
  const code = cause instanceof StatelogError && !cause.isConnectionError ? `${cause.code}: ` : '';
  try {
    await loadBackup(api, before, limits, { replace: true });
  } catch (err) {
    const saved = before ? `; its keys before are in ${before} (statelog restore --force ${before})` : '';
    return new CliFailure(`the restore failed (${code}${reason}), and the server could not be put back as it was (${(err as Error).message})${saved}`, EXIT.refused);
  }
  if (before) rmSync(dirname(before), { recursive: true, force: true });
  return new CliFailure(`the restore failed (${code}${reason}); the server was put back to the keys it held before`, EXIT.refused);
}

// A reader that went away (`statelog ls | head -2`) is not an error: stop quietly.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(EXIT.ok);
  throw err;
});

/** The server's error details worth a person's eye (currentOffset, horizon...), as " (name: value, ...)". */
function detailsText(details: Record<string, unknown>): string {
  const shown = Object.entries(details).filter(([name, value]) => name !== 'url' && (typeof value === 'number' || typeof value === 'string'));
  return shown.length === 0 ? '' : ` (${shown.map(([name, value]) => `${name}: ${String(value)}`).join(', ')})`;
}

try {
  await program.parseAsync();
} catch (err) {
  if (err instanceof CommanderError) {
    // --help and --version exit 0; usage errors exit 2, as shells expect.
    if (err.exitCode === 0) process.exit(EXIT.ok);
    if (err.code.startsWith('statelog.')) process.stderr.write(`statelog: ${err.message}\n`);
    process.exit(EXIT.usage);
  }
  if (err instanceof CliFailure || err instanceof BackupError) {
    process.stderr.write(`statelog: ${err.message}\n`);
    process.exit(err instanceof CliFailure ? err.exitCode : EXIT.refused);
  }
  if (err instanceof StatelogError) {
    if (err.isConnectionError) {
      process.stderr.write(`statelog: ${err.message}\n`);
      process.exit(EXIT.unreachable);
    }
    process.stderr.write(`statelog: ${err.code}: ${err.message}${detailsText(err.details)}\n`);
    process.exit(EXIT.refused);
  }
  process.stderr.write(`statelog: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(EXIT.refused);
}
