// An HTTP write as a request for the group committer, and its answer (PUT, DELETE and POST /v1/records).
import type { FastifyReply, FastifyRequest } from 'fastify';
import { ApiError } from '../contract/errors.js';
import type { Answer, WriteOp, WriteOutcome } from '../contract/model.js';
import { fingerprint, idempotencyKey } from '../writes/idempotency.js';
import type { WriteBatcher } from '../writes/write-batcher.js';
import { exactText } from './exact-numbers.js';
import { sendAnswer } from './reply.js';

/** True when a parsed JSON value holds ±Infinity (what JSON.parse makes of 1e400). */
function hasNonFiniteNumber(value: unknown): boolean {
  const pending = [value];
  while (pending.length > 0) {
    const next = pending.pop();
    if (typeof next === 'number' && !Number.isFinite(next)) return true;
    if (next !== null && typeof next === 'object') for (const child of Object.values(next)) pending.push(child);
  }
  return false;
}

/** A value's JSON text: 413 above `maxBytes`, 400 when nested too deep or holding a number beyond a double. */
export function valueText(value: unknown, maxBytes: number, details: Record<string, unknown> = {}, exact?: unknown): string {
  let text: string;
  try {
    // `exact`: the same value from a lossless parse (exact-numbers.ts), numbers as written.
    text = exact === undefined ? JSON.stringify(value) : exactText(exact);
  } catch {
    throw new ApiError('invalid_request', 'value is nested too deeply', details);
  }
  // JSON.stringify writes ±Infinity as null: refused rather than stored as another value.
  if ((exact !== undefined || text.includes('null')) && hasNonFiniteNumber(value)) {
    throw new ApiError('invalid_request', 'value has a number beyond the range of a double (about ±1.8e308)', details);
  }
  // A UTF-16 code unit is at most 3 bytes of UTF-8: a short text needs no count.
  const bytes = text.length * 3 > maxBytes ? Buffer.byteLength(text, 'utf8') : 0;
  if (bytes > maxBytes) {
    throw new ApiError('payload_too_large', `value is ${bytes} bytes as JSON; the limit is ${maxBytes}`, {
      ...details,
      limit: maxBytes,
    });
  }
  return text;
}

// Sends a write's answer once durable, rendered from its outcome outside the store's transaction. Settles
// with nothing after that, so that fastify waits on it without adopting the reply as a thenable.
export function submitWrite(
  batcher: WriteBatcher,
  request: FastifyRequest,
  reply: FastifyReply,
  ops: WriteOp[],
  render: (outcome: WriteOutcome) => Answer,
): Promise<void> {
  const key = idempotencyKey(request.headers['idempotency-key'], request.tokenEntry?.name ?? null);
  const idempotency = key && {
    key,
    fingerprint: fingerprint({
      method: request.method,
      // The route and its decoded parameters: a%2Fb and a%2fb name the same key.
      path: `${request.routeOptions.url} ${JSON.stringify(request.params)}`,
      ifMatch: request.headers['if-match'],
      ifNoneMatch: request.headers['if-none-match'],
      // Two bodies that differ only in digits a double cannot hold differ here too.
      body: request.exactBody === undefined ? request.body : { exact: exactText(request.exactBody) },
    }),
  };
  return batcher.submit(idempotency ? { ops, idempotency } : { ops }).then((result) => {
    if (result.replayed) reply.header('idempotent-replayed', 'true');
    sendAnswer(reply, 'answer' in result ? result.answer : render(result.outcome));
  });
}
