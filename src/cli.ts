#!/usr/bin/env node
// The statelog command: run the server, read and write keys, take snapshots, watch
// changes, compact, back up or restore (through the server, or the SQLite file), and
// make token-file entries (cli/token.ts).
import { readFileSync } from 'node:fs';
import { Command, CommanderError, Option } from 'commander';
import { StatelogClient, StatelogError } from '@statelog/client';
import { BackupError } from './backup-file.js';
import { addBackupCommand } from './cli/backup.js';
import { CliFailure, EXIT, EXIT_HELP, usage, type Cli } from './cli/common.js';
import { readTlsFlags } from './cli/connection.js';
import { addCompactCommand } from './cli/compact.js';
import { addConsumersCommand } from './cli/consumers.js';
import { addDelCommand } from './cli/del.js';
import { addGetCommand } from './cli/get.js';
import { addHistoryCommand } from './cli/history.js';
import { addIncrCommand } from './cli/incr.js';
import { addLsCommand } from './cli/ls.js';
import { addPutCommand } from './cli/put.js';
import { addRestoreCommand } from './cli/restore.js';
import { addServeCommand } from './cli/serve.js';
import { addSnapshotCommand } from './cli/snapshot.js';
import { addStatsCommand } from './cli/stats.js';
import { addTailCommand } from './cli/tail.js';
import { addTokenCommand } from './cli/token.js';

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

const cli: Cli = { client, serverUrl };

addTokenCommand(program);
addServeCommand(program);
addGetCommand(program, cli);
addPutCommand(program, cli);
addDelCommand(program, cli);
addHistoryCommand(program, cli);
addLsCommand(program, cli);
addIncrCommand(program, cli);
addSnapshotCommand(program, cli);
addTailCommand(program, cli);
addCompactCommand(program, cli);
addStatsCommand(program, cli);
addConsumersCommand(program, cli);
addBackupCommand(program, cli);
addRestoreCommand(program, cli);

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
