// `statelog consumers`: the positions the server keeps for groups of workers.
import { CliFailure, EXIT, offsetOption, print, type Cli } from './common.js';
import type { Command } from 'commander';

export function addConsumersCommand(program: Command, cli: Cli): void {
  const consumers = program
    .command('consumers')
    .description('list consumers with their lag (also: show, commit, delete)')
    .action(async () => {
      for (const consumer of (await cli.client().consumers()).consumers) print(consumer);
    });
  consumers
    .command('show <name>')
    .description("a consumer's offset, lag, commit time and hold (exit 1 if there is none)")
    .action(async (name: string) => {
      const consumer = await cli.client().consumer(name);
      if (!consumer) throw new CliFailure(`not_found: no consumer "${name}"`, EXIT.refused);
      print(consumer);
    });
  consumers
    .command('commit <name> <offset>')
    .description("commit a consumer's position (forward only, unless --rewind)")
    .option('--rewind', 'allow a position behind the committed one')
    .option('--hold', 'keep the delete markers above it from compaction (bounded by the server)')
    .option('--no-hold', 'release its hold')
    .option('--epoch <epoch>', 'the epoch the offset belongs to (refused if the log has another)')
    .action(async (name: string, offset: string, flags: { rewind?: boolean; hold?: boolean; epoch?: string }, command: Command) => {
      // Neither --hold nor --no-hold: the hold stays as it is.
      const holdGiven = command.getOptionValueSource('hold') === 'cli';
      const options = { ...(flags.rewind ? { rewind: true } : {}), ...(holdGiven ? { hold: flags.hold } : {}), ...(flags.epoch ? { epoch: flags.epoch } : {}) };
      print(await cli.client().commitConsumer(name, offsetOption(offset), options));
    });
  consumers
    .command('delete <name>')
    .description('delete a consumer and its hold (exit 1 if there is none)')
    .action(async (name: string) => {
      if (!(await cli.client().deleteConsumer(name))) throw new CliFailure(`not_found: no consumer "${name}"`, EXIT.refused);
    });
}
