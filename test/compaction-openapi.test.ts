// docs/openapi-fragments/compaction.yaml is valid OpenAPI 3.1 (once placed in a document
// with the Error schema that openapi.yaml defines) and describes the real answers.
import { readFileSync } from 'node:fs';
import { compileErrors, validate } from '@readme/openapi-parser';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { compactSchema } from '../src/schemas.js';
import type { SqliteStore } from '../src/store/sqlite-store.js';
import { json, startApp, type TestApp } from './helpers.js';

interface Fragment {
  paths: Record<string, { post: { responses: Record<string, unknown> } }>;
  components: { schemas: Record<string, object> };
}

const fragment = parse(readFileSync(new URL('../docs/openapi-fragments/compaction.yaml', import.meta.url), 'utf8')) as Fragment;
const ErrorSchema = {
  type: 'object',
  required: ['error'],
  properties: {
    error: {
      type: 'object',
      required: ['code', 'message'],
      properties: { code: { type: 'string' }, message: { type: 'string' } },
    },
  },
};
const document = () => ({
  openapi: '3.1.0',
  info: { title: 'statelog compaction fragment', version: '1' },
  paths: structuredClone(fragment.paths),
  components: { schemas: { ...structuredClone(fragment.components.schemas), Error: ErrorSchema } },
});

const ajv = new Ajv2020({ strict: false, allErrors: true });
ajv.addSchema({ $id: 'doc', ...document() });
const conforms = (schema: string, body: unknown) => {
  const check = ajv.getSchema(`doc#/components/schemas/${schema}`)!;
  return check(body) ? true : ajv.errorsText(check.errors);
};

let t: TestApp;
beforeAll(async () => {
  t = await startApp({ STATELOG_TOMBSTONE_RETENTION_MS: '0' });
});
afterAll(async () => {
  await t.close();
});

describe('the compaction OpenAPI fragment', () => {
  it('is valid OpenAPI 3.1', async () => {
    const result = await validate(document() as unknown as Parameters<typeof validate>[0]);
    expect(result.valid, result.valid ? '' : compileErrors(result)).toBe(true);
  });

  it('lists every status the route can answer', () => {
    const documented = Object.keys(fragment.paths['/v1/admin/compact']!.post.responses).sort();
    expect(documented).toEqual(Object.keys(compactSchema.response).sort());
  });

  it('describes the answers of POST /v1/admin/compact and lastCompaction', async () => {
    for (let i = 0; i < 5; i++) await t.http.put('/v1/keys/a').set(json).send({ value: i });
    await t.http.delete('/v1/keys/a');
    const compact = await t.http.post('/v1/admin/compact');
    expect(compact.body).toMatchObject({ removed: 6, tombstonesRemoved: 1 });
    expect(conforms('CompactionResult', compact.body)).toBe(true);
    const stats = await t.http.get('/v1/stats');
    expect(conforms('LastCompaction', stats.body.lastCompaction)).toBe(true);
    // The schemas are strict enough to tell a wrong answer.
    expect(conforms('LastCompaction', { ...stats.body.lastCompaction, trigger: 'cron' })).not.toBe(true);
    expect(conforms('CompactionResult', { ...compact.body, extra: 1 })).not.toBe(true);
  });

  it('describes its error answers', async () => {
    const unsupported = await t.http.post('/v1/admin/compact').set('content-type', 'text/plain').send('now');
    expect(unsupported.status).toBe(415);
    expect(conforms('Error', unsupported.body)).toBe(true);
    const invalid = await t.http.post('/v1/admin/compact').set(json).send('{');
    expect(invalid.status).toBe(400);
    expect(conforms('Error', invalid.body)).toBe(true);

    (t.app.services.store as SqliteStore).db.exec(
      `CREATE TEMP TRIGGER fail_compaction BEFORE DELETE ON log BEGIN SELECT RAISE(ABORT, 'injected'); END`,
    );
    for (let i = 0; i < 2; i++) await t.http.put('/v1/keys/b').set(json).send({ value: i });
    const failed = await t.http.post('/v1/admin/compact');
    (t.app.services.store as SqliteStore).db.exec('DROP TRIGGER fail_compaction');
    expect(failed.status).toBe(503);
    expect(conforms('Error', failed.body)).toBe(true);
  });
});
