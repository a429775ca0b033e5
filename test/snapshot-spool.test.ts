// The snapshot spool's own edges, through GET /v1/snapshot on either store: lines that
// straddle its write buffers and a value larger than one, multi-byte keys cut anywhere
// by the chunks sent, the digest of a filtered snapshot summed while spooling, and the
// spool budget refusing a snapshot before any byte, or cutting one already answered,
// then giving its bytes back; a reader that keeps up served from memory past the start,
// a slow one from the file.
import { mkdirSync, rmSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { digestHex, digestOf } from '../src/contract/digest.js';
import { spoolSnapshot, type SpooledSnapshot } from '../src/snapshot/snapshot-spool.js';
import { SpoolBudget } from '../src/snapshot/spool-budget.js';
import { json, startApp, tempDir, type TestApp } from './support/helpers.js';
import { baseUrl } from './support/stream-clients.js';

let t: TestApp | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

/** Larger than the spool's 1 MiB write buffer. */
const HUGE = { text: 'h'.repeat(1536 * 1024) };

/** Keys written a batch: the most a batch may hold, as the data's size is the point, not its writes. */
const FILL_BATCH = 1000;

async function fill(app: TestApp, count: number, prefix: string, padding = 700): Promise<void> {
  for (let at = 0; at < count; at += FILL_BATCH) {
    const records = Array.from({ length: Math.min(FILL_BATCH, count - at) }, (_, i) => ({
      key: `${prefix}/é${String(at + i).padStart(5, '0')}/日本`,
      value: { n: at + i, pad: 'p'.repeat((at + i) % padding) },
    }));
    const res = await app.http.post('/v1/records').set(json).send({ records });
    expect(res.status).toBe(200);
  }
}

async function snapshotLines(app: TestApp, prefix = ''): Promise<{ entries: { key: string; value: unknown; offset: number }[]; trailer: Record<string, unknown> }> {
  const res = await app.http.get(`/v1/snapshot?prefix=${encodeURIComponent(prefix)}`).buffer(true).parse((r, done) => {
    const chunks: Buffer[] = [];
    r.on('data', (chunk: Buffer) => chunks.push(chunk));
    r.on('end', () => done(null, Buffer.concat(chunks).toString('utf8')));
  });
  expect(res.status).toBe(200);
  const lines = (res.body as string).trimEnd().split('\n').map((line) => JSON.parse(line) as Record<string, unknown>);
  const trailer = lines.pop()!;
  return { entries: lines as { key: string; value: unknown; offset: number }[], trailer };
}

/** GET /v1/snapshot by a reader that stops for `pauseMs` after its first bytes: the spool runs ahead of it into the file. */
function readPausing(app: TestApp, pauseMs: number): Promise<{ status: number; text: string; complete: boolean }> {
  return new Promise((resolve, reject) => {
    const request = http.get(`${baseUrl(app.app)}/v1/snapshot`, { agent: false }, (response) => {
      let text = '';
      response.setEncoding('utf8');
      response.once('data', () => {
        response.pause();
        setTimeout(() => response.resume(), pauseMs);
      });
      response.on('data', (chunk: string) => (text += chunk));
      const done = () => resolve({ status: response.statusCode!, text, complete: response.complete });
      response.on('end', done);
      response.on('error', done);
      response.on('aborted', done);
    });
    request.on('error', reject);
  });
}

describe('the snapshot spool', () => {
  it('sends every line whole across its buffers, a value larger than one included, with the digest of a prefix', async () => {
    t = await startApp({ STATELOG_SYNC: 'normal', STATELOG_MAX_VALUE_BYTES: String(2 * 1024 * 1024) });
    await fill(t, 6000, 'a');
    await t.http.put('/v1/keys/b%2Fhuge').set(json).send({ value: HUGE }).expect(200);
    await fill(t, 3000, 'c');

    const whole = await snapshotLines(t);
    expect(whole.entries).toHaveLength(9001);
    expect(whole.trailer).toMatchObject({ end: true, count: 9001 });
    const keys = whole.entries.map((e) => e.key);
    expect(keys).toEqual([...keys].sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y))));
    expect(whole.entries.find((e) => e.key === 'b/huge')!.value).toEqual(HUGE);
    expect(whole.entries[4321]).toMatchObject({ key: 'a/é04321/日本', value: { n: 4321, pad: 'p'.repeat(4321 % 700) } });
    expect(whole.trailer.digest).toBe(digestHex(digestOf(whole.entries)));

    const filtered = await snapshotLines(t, 'c/');
    expect(filtered.entries).toHaveLength(3000);
    expect(filtered.trailer).toMatchObject({ end: true, count: 3000 });
    expect(filtered.trailer.digest).toBe(digestHex(digestOf(filtered.entries)));
  });

  it('refuses at start-up a budget in which no snapshot larger than its start could begin, saying what to set', async () => {
    // A 3 MB state under a 2 MiB budget was refused 503 at every request, whatever the reader.
    await expect(startApp({ STATELOG_SPOOL_MAX_BYTES: String(2 * 1024 * 1024) })).rejects.toThrow(/STATELOG_SPOOL_MAX_BYTES: expected at least 5242880 .*spooled whole/);
    t = await startApp({ STATELOG_SYNC: 'normal', STATELOG_SPOOL_MAX_BYTES: String(5 * 1024 * 1024) });
    await fill(t, 7000, 'a');
    const whole = await snapshotLines(t);
    expect(whole.trailer).toMatchObject({ end: true, count: 7000 });
  });

  it('cuts a snapshot already answered when its spool then passes STATELOG_SPOOL_MAX_BYTES: no last line, and the bytes come back', async () => {
    // The answer starts once 4 MiB are spooled: a budget of 5 MiB runs out after that.
    t = await startApp({ STATELOG_SYNC: 'normal', STATELOG_SPOOL_MAX_BYTES: String(5 * 1024 * 1024) });
    await fill(t, 16_000, 'a');
    const cut = await readPausing(t, 300);
    expect(cut.status).toBe(200);
    expect(cut.complete).toBe(false);
    expect(cut.text.length).toBeGreaterThan(0);
    expect(cut.text).not.toContain('"end":true');
    // What the cut spool had taken is free again.
    const small = await snapshotLines(t, 'a/é001');
    expect(small.trailer).toMatchObject({ end: true, count: 100 });
  });

  it('gives a budget that fits one snapshot to one at a time: slow readers all finish, or are refused before any byte', async () => {
    // Some 12 MiB of snapshot, a budget of 20 MiB: room for one spool, not two, but for
    // the 4 MiB after which each of four answers would start.
    t = await startApp({ STATELOG_SYNC: 'normal', STATELOG_SPOOL_MAX_BYTES: String(20 * 1024 * 1024) });
    await fill(t, 28_000, 'a');
    const answers = await Promise.all([1, 2, 3, 4].map(() => readPausing(t!, 1500)));
    const finished = answers.filter((answer) => answer.status === 200);
    expect(finished.length).toBeGreaterThanOrEqual(1);
    for (const answer of finished) {
      expect(answer.complete).toBe(true);
      expect(answer.text).toContain('"end":true');
    }
    for (const answer of answers.filter((a) => a.status !== 200)) {
      expect(answer.status).toBe(503);
      expect(JSON.parse(answer.text)).toMatchObject({ error: { code: 'unavailable', message: expect.stringMatching(/snapshot/) } });
    }
  });

  it('takes a snapshot below the smallest budget whole; one above it is cut short, with no last line', async () => {
    t = await startApp({ STATELOG_SYNC: 'normal', STATELOG_SPOOL_MAX_BYTES: String(5 * 1024 * 1024) });
    await fill(t, 1500, 'a', 400);
    const fits = await snapshotLines(t);
    expect(fits.trailer).toMatchObject({ end: true, count: 1500 });
    await fill(t, 16_000, 'b');
    const cut = await readPausing(t, 0);
    expect(cut.status).toBe(200);
    expect(cut.complete).toBe(false);
    expect(cut.text).not.toContain('"end":true');
  });

  it('answers 503 for a spool folder that is gone, and fails /readyz until it is back', async () => {
    const spoolDir = join(tempDir(), 'spool');
    t = await startApp({ STATELOG_SPOOL_DIR: spoolDir });
    await t.http.put('/v1/keys/a').set(json).send({ value: 1 }).expect(200);
    rmSync(spoolDir, { recursive: true });
    const refused = await t.http.get('/v1/snapshot');
    expect(refused.status).toBe(503);
    expect(refused.headers['retry-after']).toBeDefined();
    expect(refused.body).toMatchObject({ error: { code: 'unavailable', reason: 'spool', message: expect.stringContaining(spoolDir) } });
    const ready = await t.http.get('/readyz');
    expect(ready.status).toBe(503);
    expect(ready.body.error.reason).toBe('spool');
    mkdirSync(spoolDir);
    expect((await t.http.get('/readyz')).status).toBe(200);
    expect((await snapshotLines(t)).trailer).toMatchObject({ end: true, count: 1 });
  });

  describe('past the start, with a budget of 8 MiB for a snapshot of some 18 MiB', () => {
    const MiB = 1024 * 1024;
    let app: TestApp;
    let expected: string;
    beforeAll(async () => {
      app = await startApp({ STATELOG_SYNC: 'normal' });
      await fill(app, 24_000, 'm', 1400);
      const reader = await app.app.services.store.openSnapshot('');
      const lines: string[] = [];
      for (let page = await reader.nextJson('entry', 1000); page.length > 0; page = await reader.nextJson('entry', 1000)) lines.push(...page);
      reader.close();
      expected = lines.map((line) => `${line}\n`).join('');
      expect(Buffer.byteLength(expected)).toBeGreaterThan(16 * MiB);
    });
    afterAll(async () => {
      await app.close();
    });

    async function spool(budget: SpoolBudget): Promise<SpooledSnapshot> {
      return spoolSnapshot(await app.app.services.store.openSnapshot(''), 'entry', app.dir, budget);
    }

    it('keeps the whole snapshot in the file for readers yet to come: one larger than the budget is cut, saying so', async () => {
      const budget = new SpoolBudget(8 * MiB);
      const spooled = await spool(budget);
      const buffer = Buffer.allocUnsafe(MiB);
      const failure = await (async () => {
        while ((await spooled.readInto(buffer)) > 0);
      })().catch((err: unknown) => err);
      spooled.close();
      expect(failure).toMatchObject({
        statusCode: 503,
        message: expect.stringMatching(/more spool space than STATELOG_SPOOL_MAX_BYTES allows \(8388608 bytes\): a snapshot is spooled whole, so raise STATELOG_SPOOL_MAX_BYTES/),
        details: { reason: 'spool_max_bytes', spoolMaxBytes: 8 * MiB },
      });
      expect(budget.usedBytes).toBe(0);
    });

    it('spools for a slow reader, in order, and cuts it once the file would pass the budget', async () => {
      const budget = new SpoolBudget(8 * MiB);
      const spooled = await spool(budget);
      const chunks: Buffer[] = [];
      const failure = await (async () => {
        for (;;) {
          const buffer = Buffer.allocUnsafe(64 * 1024);
          const bytes = await spooled.readInto(buffer);
          if (bytes === 0) return null;
          chunks.push(buffer.subarray(0, bytes));
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      })().catch((err: unknown) => err);
      spooled.close();
      expect(failure).toMatchObject({ statusCode: 503, code: 'unavailable' });
      // What was read before the cut is the snapshot's beginning.
      const read = Buffer.concat(chunks);
      expect(read.length).toBeGreaterThan(0);
      expect(read.equals(Buffer.from(expected).subarray(0, read.length))).toBe(true);
    });

    it('hands a reader that stops and starts again the same bytes, behind the spooling and caught up in turns', async () => {
      const budget = new SpoolBudget(64 * MiB);
      const spooled = await spool(budget);
      const chunks: Buffer[] = [];
      for (let read = 0; ; read++) {
        const buffer = Buffer.allocUnsafe(64 * 1024);
        const bytes = await spooled.readInto(buffer);
        if (bytes === 0) break;
        chunks.push(buffer.subarray(0, bytes));
        // Every 40 reads a pause long enough for the spooling to move ahead into the file.
        if (read % 40 === 39) await new Promise((resolve) => setTimeout(resolve, 30));
      }
      spooled.close();
      expect(Buffer.concat(chunks).toString('utf8')).toBe(expected);
    });
  });
});
