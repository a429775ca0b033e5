// Server-Sent Events framing (https://html.spec.whatwg.org/multipage/server-sent-events.html).
import { ApiError } from '../contract/errors.js';

/** One event. Each line of `data` becomes its own `data:` field, as the format requires. */
export function sseEvent(event: string, data: string, id?: number): string {
  const head = id === undefined ? `event: ${event}\n` : `id: ${id}\nevent: ${event}\n`;
  const body = data.includes('\n') ? data.split('\n').join('\ndata: ') : data;
  return `${head}data: ${body}\n\n`;
}

/** A comment line: ignored by clients, it keeps intermediaries from timing out. */
export function sseComment(text: string): string {
  return `: ${text}\n\n`;
}

/** Tells the client how long to wait before reconnecting. */
export function sseRetry(ms: number): string {
  return `retry: ${ms}\n\n`;
}

/** The Last-Event-ID header as an offset; undefined when absent or empty (as browsers send none). */
export function parseLastEventId(header: string | string[] | undefined): number | undefined {
  if (header === undefined || header.length === 0) return undefined;
  const text = Array.isArray(header) ? '' : header.trim();
  const offset = /^\d{1,16}$/.test(text) ? Number(text) : NaN;
  if (!Number.isSafeInteger(offset)) {
    throw new ApiError('invalid_request', 'Last-Event-ID must be one offset, as sent in an event id');
  }
  return offset;
}
