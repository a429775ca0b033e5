// Load shedding: a server whose event loop is saturated answers 503 `unavailable` with
// Retry-After at once, and serves again when the load stops. The app runs in this
// process, so the test saturates the very event loop the server runs on.
import { afterEach, describe, expect, it } from 'vitest';
import { startApp, type TestApp } from './support/helpers.js';
import { askUntil, saturate } from './support/load.js';

const SAMPLE_MS = 50;
let t: TestApp | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

describe('overload', () => {
  it('answers 503 unavailable with Retry-After while saturated, and recovers', async () => {
    t = await startApp({ STATELOG_MAX_EVENT_LOOP_DELAY_MS: '40', STATELOG_LOAD_SAMPLE_INTERVAL_MS: String(SAMPLE_MS) });
    const http = t.http;
    // Start-up itself (module loading, migrations) may read as load in the first samples.
    await askUntil(() => http.get('/v1/stats'), (res) => res.status === 200, 15_000);

    const load = saturate(150);
    try {
      const refused = await askUntil(() => http.get('/v1/stats'), (res) => res.status === 503, 15_000);
      expect(refused.body).toEqual({ error: { code: 'unavailable', message: expect.any(String) } });
      expect(refused.headers['retry-after']).toBe('1');
      // Still saturated: readiness is shed too, liveness and metrics are not.
      expect((await http.get('/readyz')).status).toBe(503);
      expect((await http.get('/healthz')).status).toBe(200);
      expect((await http.get('/metrics')).status).toBe(200);
    } finally {
      await load.stop();
    }

    const served = await askUntil(() => http.get('/v1/stats'), (res) => res.status !== 503, 15_000);
    expect(served.status).toBe(200);
    expect((await http.get('/readyz')).status).toBe(200);
  });

  it('is off with STATELOG_MAX_EVENT_LOOP_DELAY_MS=0: a saturated server still answers', async () => {
    t = await startApp({ STATELOG_MAX_EVENT_LOOP_DELAY_MS: '0', STATELOG_LOAD_SAMPLE_INTERVAL_MS: String(SAMPLE_MS) });
    const load = saturate(150);
    try {
      // Enough answers to span many sample intervals of saturation.
      for (let i = 0; i < 5; i++) expect((await t.http.get('/v1/stats')).status).toBe(200);
    } finally {
      await load.stop();
    }
  });
});
