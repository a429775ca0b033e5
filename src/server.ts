// The statelog process: configuration, logging, listening and graceful shutdown.
import closeWithGrace from 'close-with-grace';
import { buildApp, type App } from './app.js';
import { ConfigError, loadConfig, type Config } from './config.js';
import { checkCertificateDates, reload } from './reload.js';

const message = (err: unknown) => (err instanceof Error ? err.message : String(err));

function fail(line: string): never {
  process.stderr.write(`statelog: ${line}\n`);
  process.exit(1);
}

export async function main(env: NodeJS.ProcessEnv = process.env): Promise<App> {
  let config: Config;
  try {
    config = loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) fail(`invalid setting ${err.message}`);
    throw err;
  }

  let app: App;
  try {
    // A failed step closes what the steps before it opened; its message names the step.
    app = await buildApp(config, {
      // A failed fsync: the app has logged its one line (at fatal, with the error). Exit at
      // once, before any write it covered is answered; a restart recovers from the WAL on disk.
      onFatal: () => process.exit(1),
    });
  } catch (err) {
    fail(message(err));
  }

  if (!app.authenticator) {
    app.log.warn('neither STATELOG_TOKENS nor STATELOG_TOKENS_FILE is set: every route is open to anyone who can connect');
  }

  if (config.tls) checkCertificateDates(app, config.tls.cert, config.tls.certPath);
  // SIGHUP (log rotation, systemctl reload) reloads, never stops (reload.ts).
  process.on('SIGHUP', () => reload(app, config));

  // SIGTERM/SIGINT: stop accepting, end long polls and streams, finish writes in flight,
  // checkpoint and close the database, then exit 0 (close-with-grace exits 1 after 10 s).
  closeWithGrace({ delay: 10_000, skip: ['SIGHUP'] }, async ({ signal, err }) => {
    if (err) app.log.error({ err }, 'fatal error, shutting down');
    else app.log.info({ signal }, 'shutting down');
    await app.close();
  });

  try {
    await app.listen({ port: config.port, host: config.host });
  } catch (err) {
    await app.close().catch((closeErr: unknown) => process.stderr.write(`statelog: closing failed: ${message(closeErr)}\n`));
    fail(`cannot listen on ${config.host}:${config.port}: ${message(err)}`);
  }
  return app;
}

await main();
