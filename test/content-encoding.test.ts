// Content-Encoding of request bodies: decoded (gzip, deflate, br) with the size limit on
// the decoded body, refused with 415 when not decoded, never stored as if it were JSON.
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApp, type TestApp } from './support/helpers.js';
import { baseUrl } from './support/stream-clients.js';

const MAX_VALUE_BYTES = 64 * 1024;

let t: TestApp;
let base: string;
beforeAll(async () => {
  t = await startApp({ STATELOG_SYNC: 'normal', STATELOG_MAX_VALUE_BYTES: String(MAX_VALUE_BYTES) });
  base = baseUrl(t.app);
});
afterAll(async () => {
  await t.close();
});

async function send(method: string, path: string, body: Buffer | string, encoding?: string) {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (encoding !== undefined) headers['content-encoding'] = encoding;
  const res = await fetch(`${base}${path}`, { method, headers, body });
  return { status: res.status, body: (await res.json()) as { error?: { code: string; message: string } } & Record<string, unknown> };
}

async function stored(key: string): Promise<unknown> {
  const res = await fetch(`${base}/v1/keys/${key}`);
  return res.status === 404 ? undefined : ((await res.json()) as { value: unknown }).value;
}

describe('Content-Encoding', () => {
  const body = JSON.stringify({ value: { text: 'x'.repeat(1000), n: 1 } });
  const encoded: Record<string, Buffer> = {
    gzip: gzipSync(body),
    'x-gzip': gzipSync(body),
    deflate: deflateSync(body),
    br: brotliCompressSync(body),
  };

  for (const [coding, bytes] of Object.entries(encoded)) {
    it(`decodes ${coding}`, async () => {
      const key = `enc-${coding}`;
      expect((await send('PUT', `/v1/keys/${key}`, bytes, coding)).status).toBe(200);
      expect(await stored(key)).toEqual(JSON.parse(body).value);
    });
  }

  it('passes identity (any case) and decodes a gzip batch', async () => {
    expect((await send('PUT', '/v1/keys/enc-identity', body, 'Identity')).status).toBe(200);
    const batch = gzipSync(JSON.stringify({ records: [{ key: 'enc-b1', value: 1 }, { key: 'enc-b2', value: 2 }] }));
    expect((await send('POST', '/v1/records', batch, 'gzip')).status).toBe(200);
    expect([await stored('enc-b1'), await stored('enc-b2')]).toEqual([1, 2]);
  });

  it('refuses a coding it does not decode with 415, storing nothing', async () => {
    for (const coding of ['compress', 'zstd', 'gzip, br']) {
      const { status, body: answer } = await send('PUT', '/v1/keys/enc-refused', body, coding);
      expect(status).toBe(415);
      expect(answer.error?.code).toBe('unsupported_media_type');
      expect(answer.error?.message).toContain('gzip');
    }
    expect(await stored('enc-refused')).toBeUndefined();
  });

  it('answers 400 for a body that is not what its coding says (br over plain JSON), storing nothing', async () => {
    for (const coding of ['br', 'gzip', 'deflate']) {
      const { status, body: answer } = await send('PUT', '/v1/keys/enc-plain', body, coding);
      expect(status).toBe(400);
      expect(answer.error?.code).toBe('invalid_request');
    }
    expect(await stored('enc-plain')).toBeUndefined();
  });

  it('applies the size limit to the decoded body: a zip bomb gets 413', async () => {
    // About 50 KB on the wire, 50 MB once inflated.
    const bomb = gzipSync(Buffer.concat([Buffer.from('{"value":"'), Buffer.alloc(50 * 1024 * 1024, 0x30), Buffer.from('"}')]));
    expect(bomb.length).toBeLessThan(MAX_VALUE_BYTES);
    const started = performance.now();
    const { status, body: answer } = await send('PUT', '/v1/keys/enc-bomb', bomb, 'gzip');
    expect(status).toBe(413);
    expect(answer.error?.code).toBe('payload_too_large');
    expect(performance.now() - started).toBeLessThan(2000);
    expect(await stored('enc-bomb')).toBeUndefined();
    // The connection and the server carry on.
    expect((await send('PUT', '/v1/keys/enc-after', encoded.gzip!, 'gzip')).status).toBe(200);
  });

  it('refuses a value over the value limit once decoded, however small on the wire', async () => {
    const value = 'y'.repeat(MAX_VALUE_BYTES + 1000);
    const { status } = await send('PUT', '/v1/keys/enc-big', gzipSync(JSON.stringify({ value })), 'gzip');
    expect(status).toBe(413);
  });
});
