// docs/openapi-fragments/operations.yaml: valid OpenAPI 3.1 once wrapped in a document,
// and true of the server: real 401, 403 and 503 answers match what it describes.
import { readFileSync } from 'node:fs';
import { compileErrors, validate } from '@readme/openapi-parser';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { startApp, type TestApp } from './helpers.js';

interface Fragment {
  paths: Record<string, unknown>;
  components: {
    schemas: Record<string, object>;
    responses: Record<string, { headers?: Record<string, { schema: object }> }>;
  };
}

const fragment = parse(readFileSync(new URL('../docs/openapi-fragments/operations.yaml', import.meta.url), 'utf8')) as Fragment;

describe('the operations OpenAPI fragment', () => {
  it('is valid OpenAPI 3.1', async () => {
    const document = { openapi: '3.1.0', info: { title: 'statelog', version: '1' }, ...fragment };
    const result = await validate(structuredClone(document) as unknown as Parameters<typeof validate>[0]);
    expect(result.valid, result.valid ? '' : compileErrors(result)).toBe(true);
  });

  describe('matches real answers', () => {
    let t: TestApp;
    beforeAll(async () => {
      t = await startApp({
        STATELOG_TOKENS: 'read:r-token',
        STATELOG_MAX_EVENT_LOOP_DELAY_MS: '0',
      });
    });
    afterAll(() => t.close());

    const ajv = new Ajv2020({ strict: false });
    const errorBody = ajv.compile(fragment.components.schemas.Error!);
    const header = (response: string, name: string) =>
      ajv.compile(fragment.components.responses[response]!.headers![name]!.schema);

    it('401 Unauthorized', async () => {
      const res = await t.http.get('/metrics');
      expect(res.status).toBe(401);
      expect(errorBody(res.body), JSON.stringify(errorBody.errors)).toBe(true);
      expect(header('Unauthorized', 'WWW-Authenticate')(res.headers['www-authenticate'])).toBe(true);
    });

    it('403 Forbidden', async () => {
      const res = await t.http.put('/v1/keys/a').set('authorization', 'Bearer r-token').send({ value: 1 });
      expect(res.status).toBe(403);
      expect(errorBody(res.body)).toBe(true);
    });

    it('200 /metrics with the described content type', async () => {
      const res = await t.http.get('/metrics').set('authorization', 'Bearer r-token');
      expect(res.status).toBe(200);
      const described = Object.keys(
        (fragment.paths['/metrics'] as { get: { responses: { 200: { content: object } } } }).get.responses[200].content,
      );
      expect(described).toEqual([res.headers['content-type']]);
    });

    it('503 Unavailable', async () => {
      t.app.services.lifecycle.closing = true;
      try {
        const res = await t.http.get('/readyz');
        expect(res.status).toBe(503);
        expect(errorBody(res.body)).toBe(true);
        expect(header('Unavailable', 'Retry-After')(Number(res.headers['retry-after']))).toBe(true);
      } finally {
        t.app.services.lifecycle.closing = false;
      }
    });
  });
});
