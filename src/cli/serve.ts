// `statelog serve`: the server, its settings from flags over the environment.
import type { Command } from 'commander';

export function addServeCommand(program: Command): void {
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
      await import('../server.js');
    });
}
