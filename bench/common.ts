// Shared by the benchmarks: a cached pre-filled log, statistics and result files.
import { copyFileSync, existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { fillLog } from '../test/fill-log.js';

/** Scratch space for the large databases: BENCH_DIR, or a folder in the system's temp. */
export const BENCH_DIR = process.env.BENCH_DIR ?? join(tmpdir(), 'statelog-bench');

export function envNumber(name: string, fallback: number): number {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isFinite(value) || value <= 0) throw new Error(`${name} must be a positive number`);
  return value;
}

/**
 * A log of `records` records over `keys` keys (each key records / keys versions), filled
 * once and kept in BENCH_DIR: filling 10,000,000 records takes a while.
 */
export function filledTemplate(records: number, keys: number): string {
  mkdirSync(BENCH_DIR, { recursive: true });
  const path = join(BENCH_DIR, `log-${records}-${keys}.db`);
  if (existsSync(path)) {
    const db = new Database(path, { readonly: true });
    const head = db.prepare('SELECT head FROM meta').pluck().get();
    db.close();
    if (head === records) return path;
  }
  rmSync(path, { force: true });
  const started = performance.now();
  fillLog(path, { records, keys });
  console.log(`filled ${records.toLocaleString()} records over ${keys.toLocaleString()} keys in ${seconds(performance.now() - started)} s`);
  return path;
}

/** A fresh copy of `template` to work on (compaction changes it). */
export function workingCopy(template: string, name: string): string {
  const path = join(BENCH_DIR, name);
  for (const suffix of ['', '-wal', '-shm']) rmSync(`${path}${suffix}`, { force: true });
  copyFileSync(template, path);
  return path;
}

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

export const median = (values: number[]) => percentile(values, 50);

export const seconds = (ms: number) => (ms / 1000).toFixed(1);

export const round = (value: number, digits = 2) => Number(value.toFixed(digits));

/** Writes bench/results/<name>.json and returns its path. */
export function saveResults(name: string, results: object): string {
  const path = new URL(`./results/${name}.json`, import.meta.url);
  writeFileSync(path, `${JSON.stringify({ date: new Date().toISOString(), node: process.version, ...results }, null, 2)}\n`);
  return path.pathname;
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A request without a time limit (fetch gives up on headers after 300 s, and a large
 * compaction answers only when done). Resolves with the status and the parsed body.
 */
export function httpJson(method: string, url: string): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text ? JSON.parse(text) : null }));
    });
    req.on('error', reject);
    req.end();
  });
}
