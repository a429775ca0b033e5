import { execFile, spawn } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { StatelogClient } from '@statelog/client';
import { transfer } from '../examples/balance-transfer.js';
import { startApp, type TestApp } from './support/helpers.js';

const ROOT = fileURLToPath(new URL('../', import.meta.url));

let t: TestApp;
let url: string;
beforeEach(async () => {
  t = await startApp();
  url = `http://127.0.0.1:${(t.app.server.address() as { port: number }).port}`;
});
afterEach(async () => {
  await t.close();
});

describe('examples/balance-transfer', () => {
  it('moves money under contention without losing or doubling an update', async () => {
    const client = new StatelogClient({ url });
    await client.put('accounts/a', { balance: 1000 });
    await client.put('accounts/b', { balance: 1000 });
    // Transfers in both directions race each other.
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) => (i % 2 ? transfer(client, `t${i}`, 'a', 'b', 7) : transfer(client, `t${i}`, 'b', 'a', 3))),
    );
    expect(results.every((r) => r === 'done')).toBe(true);
    const a = (await client.get<{ balance: number }>('accounts/a'))!.value.balance;
    const b = (await client.get<{ balance: number }>('accounts/b'))!.value.balance;
    expect(a).toBe(1000 - 20 * 7 + 20 * 3);
    expect(a + b).toBe(2000);
    // A transfer retried after it was applied is not applied again.
    expect(await transfer(client, 't1', 'a', 'b', 7)).toBe('already-done');
    expect((await client.get<{ balance: number }>('accounts/a'))!.value.balance).toBe(a);
  });

  it('runs as a program against a live server', async () => {
    const output = await new Promise<string>((resolve, reject) =>
      execFile(process.execPath, ['--conditions=@statelog/source', '--import', 'tsx', 'examples/balance-transfer.ts'], { cwd: ROOT, env: { ...process.env, STATELOG_URL: url } }, (err, stdout) =>
        err ? reject(err) : resolve(stdout),
      ),
    );
    expect(JSON.parse(output)).toEqual({ transfers: { done: 20, 'insufficient-funds': 5, 'already-done': 1 }, alice: 0, bob: 100, total: 100 });
  });
});

describe('examples/mirror-worker', () => {
  it('follows changes, then restarts from its checkpoint', async () => {
    const client = new StatelogClient({ url });
    await client.put('inventory/apple', { count: 3 });
    await client.put('inventory/pear', { count: 1 });
    await client.put('orders/1', { ignored: true });
    const checkpoint = join(t.dir, 'inventory.checkpoint');

    const first = startWorker(url, checkpoint);
    expect(await first.line((l) => l.event === 'ready')).toMatchObject({ items: 2, stock: 4 });
    await client.put('inventory/pear', { count: 0 });
    expect(await first.line((l) => l.event === 'sold-out')).toMatchObject({ key: 'inventory/pear' });
    first.proc.kill('SIGTERM');
    expect(await first.line((l) => l.event === 'stopped')).toMatchObject({ items: 2, stock: 3 });

    await client.put('inventory/kiwi', { count: 5 });
    const second = startWorker(url, checkpoint);
    // Ready at once from the checkpoint, then the change made while it was away.
    expect(await second.line((l) => l.event === 'ready')).toMatchObject({ items: 2, stock: 3 });
    expect(await second.line((l) => l.event === 'set' && l.key === 'inventory/kiwi')).toBeTruthy();
    second.proc.kill('SIGTERM');
    expect(await second.line((l) => l.event === 'stopped')).toMatchObject({ items: 3, stock: 8 });
  });
});

function startWorker(url: string, checkpoint: string) {
  const proc = spawn(process.execPath, ['--conditions=@statelog/source', '--import', 'tsx', 'examples/mirror-worker.ts', checkpoint], {
    cwd: ROOT,
    env: { ...process.env, STATELOG_URL: url },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: Record<string, unknown>[] = [];
  let waiters: (() => void)[] = [];
  let buffered = '';
  proc.stdout.on('data', (chunk) => {
    buffered += chunk;
    for (let at = buffered.indexOf('\n'); at >= 0; at = buffered.indexOf('\n')) {
      lines.push(JSON.parse(buffered.slice(0, at)));
      buffered = buffered.slice(at + 1);
    }
    for (const wake of waiters) wake();
    waiters = [];
  });
  return {
    proc,
    async line(match: (line: Record<string, unknown>) => boolean): Promise<Record<string, unknown>> {
      for (;;) {
        const found = lines.find(match);
        if (found) return found;
        await new Promise<void>((resolve) => waiters.push(resolve));
      }
    },
  };
}
