// SIGHUP: the token file and the TLS certificate, key and client CA are read again; a part that cannot be
// used is refused alone, logged and counted, and the one in force stays.
import type { Server as TlsServer } from 'node:tls';
import type { App } from './app.js';
import { certificateProblem, readTlsFiles, type Config } from './config.js';
import { readTokenFile } from './token-file.js';

const reason = (err: unknown) => (err instanceof Error ? err.message : String(err));

/** A certificate out of its dates is served all the same (readiness stays 200), and said at warn. */
export function checkCertificateDates(app: App, cert: Buffer, path: string): void {
  const found = certificateProblem(cert);
  if (found) app.log.warn({ cert: path, validFrom: found.validFrom, validTo: found.validTo }, found.problem);
}

export function reload(app: App, config: Config): string[] {
  const reloaded: string[] = [];
  const refused = (message: string, err: unknown): void => {
    app.services.metrics.reloadFailed();
    app.log.error({ reason: reason(err) }, message);
  };
  const auth = app.authenticator;
  if (config.tokensFile && auth) {
    try {
      // Checked whole before anything changes: a request sees the old set or the new one.
      auth.replaceFile(readTokenFile(config.tokensFile.path));
      reloaded.push('tokens');
      app.log.info({ file: config.tokensFile.path, tokens: auth.size }, 'token file reloaded');
    } catch (err) {
      refused('token file reload refused; the tokens in force are kept', err);
    }
  }
  const tls = config.tls;
  if (tls) {
    try {
      const { cert, key, clientCa } = readTlsFiles(tls.certPath, tls.keyPath, tls.clientCaPath);
      (app.server as unknown as TlsServer).setSecureContext({ cert, key, ...(clientCa ? { ca: clientCa } : {}) });
      reloaded.push('tls');
      app.log.info({ cert: tls.certPath, ...(tls.clientCaPath ? { clientCa: tls.clientCaPath } : {}) }, 'TLS certificate and key reloaded');
      checkCertificateDates(app, cert, tls.certPath);
    } catch (err) {
      refused('TLS reload refused; the current certificate is kept', err);
    }
  }
  if (!config.tokensFile && !tls) app.log.info('SIGHUP: nothing to reload (no token file, no TLS); the server goes on');
  return reloaded;
}
