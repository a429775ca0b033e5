// /v1/keys: read, write, delete and list single keys.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { ApiError } from '../contract/errors.js';
import { checkKey } from '../contract/key-rules.js';
import { etag, notModified, writeCondition } from '../http/preconditions.js';
import { entryJson, failureAnswer, jsonAnswer, recordJson } from '../contract/render.js';
import { deleteKeySchema, getKeySchema, keyHistorySchema, listKeysSchema, putKeySchema } from '../contract/schemas.js';
import { listFiltered } from '../snapshot/scoped-reads.js';
import { requestFilter } from '../http/scope.js';
import type { Config } from '../config.js';
import type { LogStore } from '../store/log-store.js';
import type { WriteBatcher } from '../writes/write-batcher.js';
import { sendJsonText } from '../http/reply.js';
import { submitWrite, valueText } from '../http/write-request.js';

/** A listing page stops early past this much JSON: 1000 of the largest values would make a gigabyte. */
export const LIST_PAGE_CHARS = 8 * 1024 * 1024;

function encodeCursor(key: string): string {
  return Buffer.from(key, 'utf8').toString('base64url');
}

function decodeCursor(cursor: string): string {
  const key = Buffer.from(cursor, 'base64url').toString('utf8');
  if (key.length === 0 || encodeCursor(key) !== cursor) {
    throw new ApiError('invalid_request', 'cursor is not one this server gave out');
  }
  return key;
}

export interface KeyRouteOptions {
  store: LogStore;
  batcher: WriteBatcher;
  config: Pick<Config, 'maxValueBytes'>;
}

export const keyRoutes: FastifyPluginAsyncTypebox<KeyRouteOptions> = async (app, { store, batcher, config }) => {

  // Plain functions returning a promise, not async ones: an async handler's result is one more promise
  // to adopt on every request.
  app.put('/v1/keys/:key', { schema: putKeySchema, config: { scope: 'key' }, bodyLimit: config.maxValueBytes + 64 * 1024 }, (req, reply) => {
    const key = checkKey(req.params.key);
    const value = valueText(req.body.value, config.maxValueBytes, {}, req.exactBody?.value);
    const condition = writeCondition(req.headers['if-match'], req.headers['if-none-match']);
    const ttl = req.body.ttlMs === undefined ? {} : { ttlMs: req.body.ttlMs };
    return submitWrite(batcher, req, reply, [{ op: 'set', key, value, ...ttl, ...condition }], (outcome) => {
      if (!outcome.ok) return failureAnswer(outcome.failure, false);
      const { offset } = outcome.applied[0]!;
      return jsonAnswer(200, { key, offset }, { etag: etag(offset) });
    });
  });

  app.get('/v1/keys/:key', { schema: getKeySchema, config: { scope: 'key' } }, (req, reply) => {
    const key = checkKey(req.params.key);
    return store.get(key).then((entry) => {
      if (!entry) throw new ApiError('not_found', 'the key has no live value');
      reply.header('etag', etag(entry.offset));
      // No payload at all: a 304 carries neither a body nor a Content-Length of one.
      if (notModified(req.headers['if-none-match'], entry.offset)) reply.code(304).send();
      else sendJsonText(reply, entryJson(entry));
    });
  });

  app.delete('/v1/keys/:key', { schema: deleteKeySchema, config: { scope: 'key' } }, (req, reply) => {
    const key = checkKey(req.params.key);
    const condition = writeCondition(req.headers['if-match'], req.headers['if-none-match']);
    return submitWrite(batcher, req, reply, [{ op: 'delete', key, ...condition }], (outcome) => {
      if (!outcome.ok) return failureAnswer(outcome.failure, false);
      return jsonAnswer(200, { key, offset: outcome.applied[0]!.offset });
    });
  });

  // A key with no record answers an empty list, not 404 (as etcd): never written or compacted away, the
  // log cannot tell.
  app.get('/v1/keys/:key/history', { schema: keyHistorySchema, config: { scope: 'key' } }, async (req, reply) => {
    const key = checkKey(req.params.key);
    const { limit, before } = req.query;
    // One more than asked tells whether older records follow.
    const page = await store.history({ key, before: before ?? null, limit: limit + 1, maxChars: LIST_PAGE_CHARS });
    const records = page.records.slice(0, limit);
    // Full: go on below the last record sent; stopped at the scan bound: below the lowest offset examined.
    const next = page.full ? records[records.length - 1]!.offset : page.examinedTo;
    const body = `{"records":[${records.map(recordJson).join(',')}],"next":${next},"head":${page.head},"epoch":${JSON.stringify(store.epoch)}}`;
    return sendJsonText(reply, body);
  });

  app.get('/v1/keys', { schema: listKeysSchema, config: { scope: 'filter' } }, async (req, reply) => {
    const filter = requestFilter(req, req.query.prefix);
    const afterKey = req.query.cursor === undefined ? null : decodeCursor(req.query.cursor);
    const limit = req.query.limit;
    // One more than asked tells whether there is a next page.
    const { items, head, truncated, scannedTo } = await listFiltered(store, filter, { afterKey, limit: limit + 1, maxChars: LIST_PAGE_CHARS });
    const page = items.slice(0, limit);
    const more = items.length > limit || truncated === true;
    // A page that stopped at its scan bound (expired values, delete markers) goes on after the last key it examined.
    const next = more ? page[page.length - 1]!.key : scannedTo;
    const cursor = next === undefined ? 'null' : JSON.stringify(encodeCursor(next));
    return sendJsonText(reply, `{"items":[${page.map(entryJson).join(',')}],"cursor":${cursor},"offset":${head}}`);
  });
};
