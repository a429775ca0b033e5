#!/usr/bin/env node
// The statelog command: run the server, read and write keys, take snapshots, follow
// changes, compact, and back up or restore the database file.
// Exit codes: 0 done; 1 the server refused or failed (not found, precondition, ...);
// 2 a usage error.
import { once } from 'node:events';
import { createWriteStream, readFileSync } from 'node:fs';
import { Command, CommanderError, Option } from 'commander';
import { SingleBar, Presets } from 'cli-progress';
import { readEvents, StatelogClient, StatelogError } from '@statelog/client';
import { backupDatabase, restoreDatabase } from './store/sqlite/backup.js';

const program = new Command('statelog')
  .description('statelog: a key-value state service backed by a compacted log')
  .addOption(new Option('--url <url>', 'server URL').env('STATELOG_URL').default('http://127.0.0.1:8080'))
  .addOption(new Option('--token <token>', 'bearer token').env('STATELOG_TOKEN'))
  .addOption(new Option('--ca <file>', 'PEM file of the CA that signed an https:// server\'s certificate').env('STATELOG_CA'))
  .showHelpAfterError()
  .exitOverride();

function client(): StatelogClient {
  const { url, token, ca } = program.opts<{ url: string; token?: string; ca?: string }>();
  if (!/^https?:\/\//i.test(url)) throw new CommanderError(2, 'statelog.url', `--url must be http:// or https://, got ${url}`);
  let caPem: Buffer | undefined;
  // An empty STATELOG_CA counts as unset, as shells leave such variables.
  if (ca) {
    try {
      caPem = readFileSync(ca);
    } catch (err) {
      throw new CommanderError(2, 'statelog.ca', `cannot read --ca ${ca} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
    }
  }
  return new StatelogClient({ url, ...(token ? { token } : {}), ...(caPem ? { ca: caPem } : {}) });
}

const print = (value: unknown) => process.stdout.write(`${JSON.stringify(value)}\n`);

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
      if (flags.keysOnly) process.stdout.write(`${entry.key}\n`);
      else print(entry);
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

program
  .command('snapshot')
  .description('write a consistent snapshot as NDJSON (entries, then the trailer line)')
  .option('--prefix <prefix>', 'only keys with this prefix', '')
  .option('--out <file>', 'write to FILE instead of stdout')
  .action(async (flags: { prefix: string; out?: string }) => {
    const snapshot = await client().snapshot({ prefix: flags.prefix });
    const out = flags.out ? createWriteStream(flags.out) : process.stdout;
    const bar = flags.out && process.stderr.isTTY ? new SingleBar({ format: 'snapshot {value} keys', stream: process.stderr }, Presets.shades_classic) : null;
    bar?.start(0, 0);
    for await (const entry of snapshot) {
      if (!out.write(`${JSON.stringify(entry)}\n`)) await once(out, 'drain');
      bar?.increment();
    }
    out.write(`${JSON.stringify({ end: true, offset: snapshot.offset, count: snapshot.count, epoch: snapshot.epoch })}\n`);
    bar?.stop();
    if (flags.out) await new Promise((resolve) => (out as ReturnType<typeof createWriteStream>).end(resolve));
    process.stderr.write(`${snapshot.count} keys at offset ${snapshot.offset}\n`);
  });

program
  .command('tail')
  .description('follow the change stream, printing each record as a JSON line')
  .option('--after <offset>', 'start after this offset (default: the head now)', offsetOption)
  .option('--prefix <prefix>', 'only keys with this prefix', '')
  .action(async (flags: { after?: number; prefix: string }) => {
    const api = client();
    const after = flags.after ?? ((await api.stats()) as { head: number }).head;
    const res = await api.open('/v1/changes/stream', { after, prefix: flags.prefix }, {});
    for await (const event of readEvents(res.body!)) {
      if (event.event === 'record') process.stdout.write(`${event.data}\n`);
      if (event.event === 'reset') {
        const { error } = JSON.parse(event.data) as { error: { code: string; message: string } };
        throw new StatelogError(410, error.code, error.message);
      }
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
  .command('backup <file>')
  .description('copy the database online and consistently (SQLite backup API)')
  .option('--db <file>', 'the live database (STATELOG_DB)', process.env.STATELOG_DB ?? './data/statelog.db')
  .action(async (file: string, flags: { db: string }) => {
    const bar = process.stderr.isTTY ? new SingleBar({ format: 'backup [{bar}] {percentage}%', stream: process.stderr }, Presets.shades_classic) : null;
    bar?.start(100, 0);
    const pages = await backupDatabase(flags.db, file, (done, total) => bar?.update(Math.floor((done / total) * 100)));
    bar?.stop();
    process.stderr.write(`backed up ${pages} pages to ${file}\n`);
  });

program
  .command('restore <file>')
  .description('replace the database with a backup, offline; the restored log gets a new epoch')
  .option('--db <file>', 'the database to replace (STATELOG_DB)', process.env.STATELOG_DB ?? './data/statelog.db')
  .action(async (file: string, flags: { db: string }) => {
    const epoch = await restoreDatabase(file, flags.db);
    process.stderr.write(`restored ${file} to ${flags.db} with epoch ${epoch}\n`);
  });

try {
  await program.parseAsync();
} catch (err) {
  if (err instanceof CommanderError) {
    // --help and --version exit 0; usage errors exit 2, as shells expect.
    if (err.exitCode === 0) process.exit(0);
    if (err.code.startsWith('statelog.')) process.stderr.write(`statelog: ${err.message}\n`);
    process.exit(2);
  }
  if (err instanceof StatelogError) {
    process.stderr.write(`statelog: ${err.code}: ${err.message}\n`);
    process.exit(1);
  }
  process.stderr.write(`statelog: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
}
