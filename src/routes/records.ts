// POST /v1/records: an atomic batch of sets, deletes and increments.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { ApiError } from '../contract/errors.js';
import { checkKey } from '../contract/key-rules.js';
import { failureAnswer, jsonAnswer } from '../contract/render.js';
import { postRecordsSchema, type BatchItem, type Static } from '../contract/schemas.js';
import type { Config } from '../config.js';
import type { WriteBatcher } from '../writes/write-batcher.js';
import type { WriteOp } from '../contract/model.js';
import { exactText } from '../http/exact-numbers.js';
import { submitWrite, valueText } from '../http/write-request.js';

function invalid(index: number, message: string): ApiError {
  return new ApiError('invalid_request', `records[${index}]: ${message}`, { index });
}

/** An incr's number, refused when a double does not hold it as written (1e400, 16+ digits). */
function exactNumber(item: Static<typeof BatchItem>, member: 'by' | 'min' | 'max', index: number, exact?: Record<string, unknown>): number {
  const number = item[member]!;
  if (exact !== undefined && exactText(exact[member]) !== JSON.stringify(number)) {
    throw invalid(index, `"${member}" is a number a double cannot hold exactly; increments are whole numbers within ±(2^53 - 1)`);
  }
  return number;
}

/** `exact` from the lossless parse; optional members added in one order, no spread: this runs for every item. */
function toOp(item: Static<typeof BatchItem>, index: number, maxValueBytes: number, exact?: Record<string, unknown>): WriteOp {
  const key = checkKey(item.key, { index });
  if (item.ifOffset !== undefined && item.ifAbsent !== undefined) {
    throw invalid(index, 'give ifOffset or ifAbsent, not both');
  }
  const hasValue = 'value' in item;
  let op: WriteOp;
  switch (item.op ?? 'set') {
    case 'set':
      if (!hasValue) throw invalid(index, 'a set needs "value"');
      if (item.by !== undefined) throw invalid(index, '"by" belongs to op "incr"');
      op = { op: 'set', key, value: valueText(item.value, maxValueBytes, { index }, exact?.value) };
      if (item.ttlMs !== undefined) op.ttlMs = item.ttlMs;
      break;
    case 'delete':
      if (hasValue || item.by !== undefined || item.ttlMs !== undefined) throw invalid(index, 'a delete takes no "value", "by" or "ttlMs"');
      op = { op: 'delete', key };
      break;
    case 'incr':
      if (hasValue) throw invalid(index, 'an incr takes "by", not "value"');
      if (item.ttlMs !== undefined) throw invalid(index, '"ttlMs" belongs to op "set"');
      if (item.by === undefined) throw invalid(index, 'an incr needs "by"');
      op = { op: 'incr', key, by: exactNumber(item, 'by', index, exact) };
      if (item.min !== undefined) op.min = exactNumber(item, 'min', index, exact);
      if (item.max !== undefined) op.max = exactNumber(item, 'max', index, exact);
      if (item.min !== undefined && item.max !== undefined && item.min > item.max) throw invalid(index, '"min" is greater than "max"');
      break;
  }
  if (op.op !== 'incr' && (item.min !== undefined || item.max !== undefined)) throw invalid(index, '"min" and "max" belong to op "incr"');
  if (item.ifOffset !== undefined) op.ifOffset = item.ifOffset;
  if (item.ifAbsent) op.ifAbsent = true;
  return op;
}

/** The largest `POST /v1/records` body: several values of the largest size, within reason. */
export const batchBodyLimit = (maxValueBytes: number): number => Math.min(8 * maxValueBytes, 1024 * 1024 * 1024) + 64 * 1024;

export const recordRoutes: FastifyPluginAsyncTypebox<{ batcher: WriteBatcher; config: Pick<Config, 'maxValueBytes'> }> = async (
  app,
  { batcher, config },
) => {
  const bodyLimit = batchBodyLimit(config.maxValueBytes);

  // Each item's key is checked against the token's prefixes (http/scope.ts) before this runs.
  app.post('/v1/records', { schema: postRecordsSchema, config: { scope: 'batch' }, bodyLimit }, async (req, reply) => {
    const exact = req.exactBody?.records as Record<string, unknown>[] | undefined;
    const ops = req.body.records.map((item, index) => toOp(item, index, config.maxValueBytes, exact?.[index]));
    return submitWrite(batcher, req, reply, ops, (outcome) => {
      if (!outcome.ok) return failureAnswer(outcome.failure, true);
      const records = outcome.applied;
      return jsonAnswer(200, { records, offset: records[records.length - 1]!.offset });
    });
  });
};
