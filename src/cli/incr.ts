// `statelog incr`: add to a number.
import { CommanderError, type Command } from 'commander';
import { print, type Cli } from './common.js';

export function addIncrCommand(program: Command, cli: Cli): void {
  program
    .command('incr <key> [by]')
    .description('add BY (default 1) to a number and print the result')
    .action(async (key: string, by: string | undefined) => {
      const amount = by === undefined ? 1 : Number(by);
      if (!Number.isFinite(amount)) throw new CommanderError(2, 'statelog.by', `not a number: ${by}`);
      print(await cli.client().incr(key, amount));
    });
}
