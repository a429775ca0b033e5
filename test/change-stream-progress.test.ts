// The contract's 15-second bound on the time between progress events, on a quiet
// stream: slow by nature, so in a file of its own that runs beside the others.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startApp, type TestApp } from './support/helpers.js';
import { baseUrl, SseClient, writeBatch } from './support/stream-clients.js';

let t: TestApp;
beforeAll(async () => {
  t = await startApp({ STATELOG_SYNC: 'normal' });
});
afterAll(async () => {
  await t.close();
});

it('sends progress with the head at least every 15 s while nothing is written', async () => {
  const base = baseUrl(t.app);
  await writeBatch(base, [{ key: 'k', value: 1 }]);
  const stream = await SseClient.connect(`${base}/v1/changes/stream?after=1`);
  const opened = performance.now();
  await stream.until((events) => events.length === 1, 16_500);
  const elapsed = performance.now() - opened;
  expect(elapsed).toBeGreaterThan(14_000);
  expect(stream.events).toEqual([{ id: '1', event: 'progress', data: '{"offset":1}' }]);
  stream.close();
}, 30_000);
