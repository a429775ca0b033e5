// What the commands share: exit codes and failures, the connection's client, output
// and input helpers.
import { createWriteStream, type WriteStream } from 'node:fs';
import { once } from 'node:events';
import { CommanderError } from 'commander';
import { SingleBar, Presets } from 'cli-progress';
import type { StatelogClient } from '@statelog/client';

/** Exit codes, as `--help` lists them. */
export const EXIT = { ok: 0, refused: 1, usage: 2, unreachable: 3 } as const;
export const EXIT_HELP = `
Exit codes:
  0  done
  1  the server answered with an error (not found, failed condition, reset...),
     or a local file could not be read or written
  2  usage error (an unknown command or option, a bad value, a URL without http://)
  3  the server could not be reached, or did not answer in time
`;

/** A failure with its own line and exit code. */
export class CliFailure extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super(message);
  }
}

export const usage = (message: string): never => {
  throw new CliFailure(message, EXIT.usage);
};
/** The server the commands talk to (--url and the connection's options). */
export interface Cli {
  client(): StatelogClient;
  /** The server's URL, refused with one line unless it is http(s)://host[:port][/path]. */
  serverUrl(): string;
}

export const print = (value: unknown) => process.stdout.write(`${JSON.stringify(value)}\n`);

/** Writes a line, waiting while the reader is behind (a pipe into a slow program). */
export async function writeLine(out: NodeJS.WritableStream, line: string): Promise<void> {
  if (!out.write(`${line}\n`)) await once(out, 'drain');
}

export function parseValue(text: string, asString: boolean): unknown {
  if (asString) return text;
  try {
    return JSON.parse(text);
  } catch {
    throw new CommanderError(2, 'statelog.value', `VALUE must be JSON (quote a string: '"text"') or use --string`);
  }
}

export function offsetOption(text: string): number {
  if (!/^\d+$/.test(text)) throw new CommanderError(2, 'statelog.offset', `not an offset: ${text}`);
  return Number(text);
}

export async function readStdin(): Promise<string> {
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
export async function openOut(file: string, shown = file): Promise<WriteStream> {
  const stream = createWriteStream(file);
  try {
    await once(stream, 'open');
  } catch (err) {
    throw new CliFailure(`cannot write ${shown}: ${fsCause(err)}`, EXIT.refused);
  }
  return stream;
}

export async function closeOut(stream: WriteStream, file: string): Promise<void> {
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
export function progressBar(format: string): SingleBar | null {
  return process.stderr.isTTY ? new SingleBar({ format, stream: process.stderr, hideCursor: true }, Presets.shades_classic) : null;
}
