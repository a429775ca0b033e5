// POST /v1/records: an atomic batch of sets, deletes and increments.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { ApiError } from '../contract/errors.js';
import { checkKey } from '../contract/key-rules.js';
import { failureAnswer, jsonAnswer } from '../contract/render.js';
import { postRecordsSchema, type BatchItem, type Static } from '../contract/schemas.js';
import type { AppServices } from '../services.js';
import type { WriteOp } from '../store/log-store.js';
import { exactBody, exactText } from '../writes/exact-numbers.js';
import { submitWrite, valueText } from '../writes/write-request.js';

/** `exact`: the same item from a lossless parse, when the body holds a number JSON.parse changed. */
function toOp(item: Static<typeof BatchItem>, index: number, maxValueBytes: number, exact?: Record<string, unknown>): WriteOp {
  const key = checkKey(item.key, { index });
  const invalid = (message: string) => new ApiError('invalid_request', `records[${index}]: ${message}`, { index });
  if (item.ifOffset !== undefined && item.ifAbsent !== undefined) {
    throw invalid('give ifOffset or ifAbsent, not both');
  }
  const condition = {
    ...(item.ifOffset !== undefined ? { ifOffset: item.ifOffset } : {}),
    ...(item.ifAbsent ? { ifAbsent: true } : {}),
  };
  const hasValue = 'value' in item;
  switch (item.op ?? 'set') {
    case 'set':
      if (!hasValue) throw invalid('a set needs "value"');
      if (item.by !== undefined) throw invalid('"by" belongs to op "incr"');
      return {
        op: 'set',
        key,
        value: valueText(item.value, maxValueBytes, { index }, exact?.value),
        ...(item.ttlMs !== undefined ? { ttlMs: item.ttlMs } : {}),
        ...condition,
      };
    case 'delete':
      if (hasValue || item.by !== undefined || item.ttlMs !== undefined) throw invalid('a delete takes no "value", "by" or "ttlMs"');
      return { op: 'delete', key, ...condition };
    case 'incr':
      if (hasValue) throw invalid('an incr takes "by", not "value"');
      if (item.ttlMs !== undefined) throw invalid('"ttlMs" belongs to op "set"');
      if (item.by === undefined) throw invalid('an incr needs "by"');
      if (exact !== undefined && exactText(exact.by) !== JSON.stringify(item.by)) {
        throw invalid('"by" is a number a double cannot hold exactly; increments are whole numbers within ±(2^53 - 1)');
      }
      return { op: 'incr', key, by: item.by, ...condition };
  }
}

export const recordRoutes: FastifyPluginAsyncTypebox<{ services: AppServices }> = async (app, { services }) => {
  const { batcher, config } = services;
  // A batch may carry several values of the largest size, within reason.
  const bodyLimit = Math.min(8 * config.maxValueBytes, 1024 * 1024 * 1024) + 64 * 1024;

  app.post('/v1/records', { schema: postRecordsSchema, bodyLimit }, async (req, reply) => {
    const exact = exactBody(req.body)?.records as Record<string, unknown>[] | undefined;
    const ops = req.body.records.map((item, index) => toOp(item, index, config.maxValueBytes, exact?.[index]));
    return submitWrite(batcher, req, reply, ops, (outcome) => {
      if (!outcome.ok) return failureAnswer(outcome.failure, true);
      const records = outcome.applied;
      return jsonAnswer(200, { records, offset: records[records.length - 1]!.offset });
    });
  });
};
