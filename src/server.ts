// The statelog process: configuration, logging, listening and graceful shutdown.
import type { Server as TlsServer } from 'node:tls';
import closeWithGrace from 'close-with-grace';
import { buildApp, type App } from './app.js';
import { certificateProblem, ConfigError, loadConfig, readTlsFiles, type Config } from './config.js';

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

  if (!config.tokens) app.log.warn('STATELOG_TOKENS is not set: every route is open to anyone who can connect');

  // With HTTPS, SIGHUP reads the certificate and key again (a renewed certificate) and
  // serves them to new connections; a pair that cannot be used is logged and the
  // current one kept. Without HTTPS, SIGHUP shuts down as below.
  const tls = config.tls;
  // A certificate out of its dates is served all the same (readiness stays 200), and said.
  const checkDates = (cert: Buffer, path: string): void => {
    const found = certificateProblem(cert);
    if (found) app.log.warn({ cert: path, validFrom: found.validFrom, validTo: found.validTo }, found.problem);
  };
  if (tls) {
    checkDates(tls.cert, tls.certPath);
    process.on('SIGHUP', () => {
      try {
        const { cert, key } = readTlsFiles(tls.certPath, tls.keyPath);
        (app.server as unknown as TlsServer).setSecureContext({ cert, key });
        app.log.info({ cert: tls.certPath }, 'TLS certificate and key reloaded');
        checkDates(cert, tls.certPath);
      } catch (err) {
        app.log.error({ reason: message(err) }, 'TLS reload refused; the current certificate is kept');
      }
    });
  }

  // SIGTERM/SIGINT: stop accepting, end long polls and streams, finish writes in flight,
  // checkpoint and close the database, then exit 0 (close-with-grace exits 1 after 10 s).
  closeWithGrace({ delay: 10_000, skip: tls ? ['SIGHUP'] : [] }, async ({ signal, err }) => {
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
