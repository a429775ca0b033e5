// `statelog tail`: the changes as they come, one JSON line each, resumed across reconnections.
import { StatelogError, type WatchEvent } from '@statelog/client';
import type { Command } from 'commander';
import { offsetOption, usage, writeLine, type Cli } from './common.js';

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


export function addTailCommand(program: Command, cli: Cli): void {
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
      const api = cli.client();
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
}
