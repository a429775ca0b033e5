// nginx (Debian's, for the tests and the benchmarks) run with
// deploy/nginx/statelog.conf.template filled in as the official image fills it (envsubst
// of the named variables), in front of a statelog server.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from './server-process.js';

const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((path) => existsSync(path)) ?? null;
export const TEMPLATE = resolve(dirname(fileURLToPath(import.meta.url)), '../deploy/nginx/statelog.conf.template');

/** Whether nginx is installed (CI installs Debian's; a newcomer's machine may not have it). */
export const hasNginx = NGINX !== null && spawnSync(NGINX, ['-v']).status === 0;

/** The template with `${NAME}` replaced as envsubst does, only for the names given. */
export function fillTemplate(text: string, values: Record<string, string>): string {
  return text.replace(/\$\{(\w+)\}/g, (whole, name: string) => values[name] ?? whole);
}

export interface RunningNginx {
  url: string;
  /** Requests nginx sent on to the server (those whose path starts with `path`), from its log. */
  upstreamRequests(path?: string): number;
  stop(): Promise<void>;
}

/** nginx in the foreground, its files under `dir`, in front of `upstream` (host:port). */
export async function startNginx(dir: string, upstream: string): Promise<RunningNginx> {
  if (!NGINX) throw new Error('nginx is not installed');
  const port = await freePort();
  mkdirSync(join(dir, 'logs'), { recursive: true });
  const site = fillTemplate(readFileSync(TEMPLATE, 'utf8'), {
    STATELOG_UPSTREAM: upstream,
    NGINX_PORT: `127.0.0.1:${port}`,
    NGINX_CACHE_DIR: join(dir, 'cache'),
  });
  writeFileSync(join(dir, 'statelog.conf'), site);
  const access = join(dir, 'logs', 'upstream.log');
  // What the official image's nginx.conf has around the templates, with paths of the test's own.
  writeFileSync(
    join(dir, 'nginx.conf'),
    `${process.getuid?.() === 0 ? 'user root;\n' : ''}worker_processes 1;
daemon off;
pid ${join(dir, 'nginx.pid')};
error_log ${join(dir, 'logs', 'error.log')} warn;
events { worker_connections 8192; }
http {
  client_body_temp_path ${join(dir, 'body')};
  proxy_temp_path ${join(dir, 'proxy')};
  fastcgi_temp_path ${join(dir, 'fastcgi')};
  uwsgi_temp_path ${join(dir, 'uwsgi')};
  scgi_temp_path ${join(dir, 'scgi')};
  log_format upstream '$upstream_addr $request_uri';
  access_log ${access} upstream if=$upstream_addr;
  include ${join(dir, 'statelog.conf')};
}
`,
  );
  const proc: ChildProcess = spawn(NGINX, ['-p', dir, '-c', join(dir, 'nginx.conf')], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  proc.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<void>((done) => proc.once('exit', () => done()));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 10_000;
  while (!(await fetch(`${url}/healthz`).then((res) => res.status < 500, () => false))) {
    if (proc.exitCode !== null || Date.now() > deadline) {
      proc.kill('SIGKILL');
      throw new Error(`nginx did not start: ${stderr}${readFileSync(join(dir, 'logs', 'error.log'), 'utf8')}`);
    }
    await new Promise((done) => setTimeout(done, 50));
  }
  return {
    url,
    upstreamRequests: (path = '/') =>
      existsSync(access) ? readFileSync(access, 'utf8').split('\n').filter((line) => line.split(' ')[1]?.startsWith(path)).length : 0,
    async stop() {
      proc.kill('SIGQUIT');
      await Promise.race([exited, new Promise((done) => setTimeout(done, 5000))]);
      if (proc.exitCode === null) proc.kill('SIGKILL');
    },
  };
}
