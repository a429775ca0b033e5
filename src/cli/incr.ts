// `statelog incr`: add to a number, within bounds if given.
import { CommanderError, type Command } from 'commander';
import { print, type Cli } from './common.js';

function number(name: string) {
  return (text: string): number => {
    const value = text.trim() === '' ? NaN : Number(text);
    if (!Number.isFinite(value)) throw new CommanderError(2, `statelog.${name}`, `not a number: ${text}`);
    return value;
  };
}

export function addIncrCommand(program: Command, cli: Cli): void {
  program
    .command('incr <key> [by]')
    .description('add BY (default 1) to a number and print the result; with --min/--max only if it stays within them')
    .option('--min <n>', 'refuse (409 out_of_range) a result below this', number('min'))
    .option('--max <n>', 'refuse (409 out_of_range) a result above this', number('max'))
    .action(async (key: string, by: string | undefined, options: { min?: number; max?: number }) => {
      const amount = by === undefined ? 1 : number('by')(by);
      if (options.min !== undefined && options.max !== undefined && options.min > options.max) {
        throw new CommanderError(2, 'statelog.bounds', `--min ${options.min} is greater than --max ${options.max}`);
      }
      print(await cli.client().incr(key, amount, options));
    });
}
