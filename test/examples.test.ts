import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { StatelogClient } from '../src/client/index.js';
import { transfer } from '../examples/balance-transfer.js';
import { startApp, type TestApp } from './helpers.js';

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
      execFile(process.execPath, ['--import', 'tsx', 'examples/balance-transfer.ts'], { cwd: ROOT, env: { ...process.env, STATELOG_URL: url } }, (err, stdout) =>
        err ? reject(err) : resolve(stdout),
      ),
    );
    expect(JSON.parse(output)).toEqual({ transfers: { done: 20, 'insufficient-funds': 5, 'already-done': 1 }, alice: 0, bob: 100, total: 100 });
  });
});
