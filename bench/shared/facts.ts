// Facts about the machine and the software a run measured, kept with its results.
import { spawnSync } from 'node:child_process';
import { closeSync, fdatasyncSync, mkdtempSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { cpus, loadavg, release, totalmem, tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { median, ROOT } from './lib.js';

const versionIn = (folder: string): string =>
  (JSON.parse(readFileSync(join(folder, 'package.json'), 'utf8')) as { version: string }).version;
const packageVersion = (name: string) => versionIn(join(ROOT, 'node_modules', name));

/** The file system the temp folder is on (where every benchmark keeps its data). */
function filesystemOf(path: string): string {
  const out = spawnSync('df', ['--output=fstype,source', path], { encoding: 'utf8' });
  return out.status === 0 ? (out.stdout.split('\n')[1]?.trim().replace(/\s+/, ' on ') ?? 'unknown') : 'unknown';
}

/** Milliseconds of one 4 KiB write + fdatasync in the temp folder, where the benchmarks keep their data. */
export function fsyncMs(times = 100): number {
  const dir = mkdtempSync(join(tmpdir(), 'statelog-fsync-'));
  const fd = openSync(join(dir, 'probe'), 'w');
  const block = Buffer.alloc(4096, 1);
  const ms: number[] = [];
  try {
    for (let i = 0; i < times; i++) {
      const started = performance.now();
      writeSync(fd, block, 0, block.length, (i % 16) * 4096);
      fdatasyncSync(fd);
      ms.push(performance.now() - started);
    }
  } finally {
    closeSync(fd);
    rmSync(dir, { recursive: true, force: true });
  }
  return Number(median(ms).toFixed(3));
}

export function loadAverage(): [number, number, number] {
  return loadavg().map((n) => Number(n.toFixed(2))) as [number, number, number];
}

export function machine() {
  return {
    cpu: cpus()[0]?.model ?? 'unknown',
    cores: cpus().length,
    memoryGiB: Number((totalmem() / 2 ** 30).toFixed(1)),
    kernel: `${process.platform} ${release()}`,
    tmpdir: tmpdir(),
    tmpdirFilesystem: filesystemOf(tmpdir()),
    fsyncMs: fsyncMs(),
  };
}

/** Versions of the software every run touches; each figure adds those it measured. */
export function versions(): Record<string, string> {
  const db = new Database(':memory:');
  const sqlite = db.prepare('SELECT sqlite_version()').pluck().get() as string;
  db.close();
  return {
    node: process.version,
    statelog: versionIn(ROOT),
    sqlite: `${sqlite} (better-sqlite3 ${packageVersion('better-sqlite3')})`,
    fastify: packageVersion('fastify'),
    'load generator': `autocannon ${packageVersion('autocannon')} (bench/shared/load.ts); undici ${packageVersion('undici')} and nats ${packageVersion('nats')} for the closed loops of bench/shared/closed-loop.ts`,
  };
}
