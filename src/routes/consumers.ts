// /v1/consumers: named positions in the log that the server keeps for groups of workers. A
// scoped token has consumers of its own (named per token entry, as Idempotency-Keys are); an
// unscoped one, or none, shares one set of names and lists everyone's.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import { ApiError } from '../contract/errors.js';
import { checkKey } from '../contract/key-rules.js';
import { deleteConsumerSchema, getConsumerSchema, listConsumersSchema, putConsumerSchema } from '../contract/schemas.js';
import { etag, writeCondition } from '../http/preconditions.js';
import { viewOf, type ConsumerFailure } from '../store/consumer-rules.js';
import type { LogStore } from '../store/log-store.js';

const MESSAGES: Record<ConsumerFailure['code'], string> = {
  epoch_changed: 'the log was recreated or restored: an offset of another epoch means nothing here; take a new snapshot',
  offset_ahead: 'the offset is beyond the head',
  conflict: 'the offset is behind the committed one; send "rewind": true to move back',
  precondition_failed: 'the condition on the consumer does not hold',
  not_found: 'no such consumer',
};

function refusal(failure: ConsumerFailure): ApiError {
  const { code, ...details } = failure;
  return new ApiError(code, MESSAGES[code], details);
}

/** The token entry whose consumers these are: a scoped token's name, else '' (shared). */
function ownerOf(req: FastifyRequest): string {
  const entry = req.tokenEntry;
  return entry?.prefixes ? entry.name : '';
}

/** If-Match ("*" or an offset) and If-None-Match ("*") as on keys, the consumer's offset its ETag. */
function conditions(req: FastifyRequest): { ifMatch?: number | '*'; ifNoneMatch?: boolean } {
  const condition = writeCondition(req.headers['if-match'], req.headers['if-none-match']);
  const result: { ifMatch?: number | '*'; ifNoneMatch?: boolean } = {};
  if (condition.ifLive) result.ifMatch = '*';
  if (condition.ifOffset !== undefined) result.ifMatch = condition.ifOffset;
  if (condition.ifAbsent) result.ifNoneMatch = true;
  return result;
}

export const consumerRoutes: FastifyPluginAsyncTypebox<{ store: LogStore }> = async (app, { store }) => {
  // A consumer names no key: each token sees only its own.
  const config = { scope: 'owned' as const };

  app.get('/v1/consumers', { schema: listConsumersSchema, config }, async (req) => {
    const owner = ownerOf(req);
    // Unscoped callers see every consumer, each with the scoped token that made it.
    const { rows, position } = await store.consumers.list(owner === '' ? null : owner);
    return { consumers: rows.map((row) => viewOf(row, position, owner === '')), head: position.head, epoch: position.epoch };
  });

  app.get('/v1/consumers/:name', { schema: getConsumerSchema, config }, async (req, reply) => {
    const name = checkKey(req.params.name);
    const { row, position } = await store.consumers.get(ownerOf(req), name);
    if (!row) throw refusal({ code: 'not_found' });
    const view = viewOf(row, position, false);
    reply.header('etag', etag(view.offset));
    return view;
  });

  app.put('/v1/consumers/:name', { schema: putConsumerSchema, config, bodyLimit: 64 * 1024 }, async (req, reply) => {
    const name = checkKey(req.params.name);
    const owner = ownerOf(req);
    const { offset, epoch, rewind, hold } = req.body;
    const commit = { owner, name, offset, ...conditions(req) };
    const outcome = await store.consumers.commit(
      { ...commit, ...(epoch === undefined ? {} : { epoch }), ...(rewind === undefined ? {} : { rewind }), ...(hold === undefined ? {} : { hold }) },
      Date.now(),
    );
    if (!outcome.ok) throw refusal(outcome.failure);
    reply.header('etag', etag(outcome.row.offset));
    return viewOf(outcome.row, outcome.position, false);
  });

  app.delete('/v1/consumers/:name', { schema: deleteConsumerSchema, config }, async (req, reply) => {
    const name = checkKey(req.params.name);
    const { ifMatch, ifNoneMatch } = conditions(req);
    if (ifNoneMatch) throw new ApiError('invalid_request', 'If-None-Match has no meaning on a delete');
    const refused = await store.consumers.delete(ownerOf(req), name, ifMatch);
    if (refused) throw refusal(refused);
    reply.code(204).send(null);
  });
};
