// Concurrent writers that record every write a server acknowledged, and the check, after
// a crash and a restart on the same database, that each one is still there as written.
import { expect } from 'vitest';
import { readAllChanges, type WireRecord } from './stream-clients.js';

export interface AckedWrite {
  key: string;
  /** The value's JSON text as sent, every digit of it. */
  value: string;
  offset: number;
}

/**
 * One write of writer `w`, its `i`th: the answer's status and, when it is 200, the
 * records it wrote. Throws when the server is gone (the connection refused or reset).
 */
export type Write = (w: number, i: number) => Promise<{ status: number; acked?: AckedWrite[] }>;

export class Writers {
  readonly acked: AckedWrite[] = [];
  /** The status of every answer other than 200. */
  readonly refused: number[] = [];
  /** Writes sent once markSent() was called, acknowledged or not. */
  sentAfterMark = 0;
  /** Resolves once every writer has met the server gone, or stop() was called. */
  readonly done: Promise<void>;
  private marked = false;
  private stopped = false;
  private ackedAfterMark: AckedWrite[] = [];

  constructor(count: number, write: Write) {
    this.done = Promise.all(Array.from({ length: count }, (_, w) => this.run(w, write))).then(() => {});
  }

  /** From now on, count the writes sent, and keep those acknowledged apart. */
  markSent(): void {
    this.marked = true;
  }

  /** Stops writing; resolves once the writes in flight are answered. */
  stop(): Promise<void> {
    this.stopped = true;
    return this.done;
  }

  /** Acknowledged writes that were sent after markSent(). */
  get acknowledgedAfterMark(): AckedWrite[] {
    return this.ackedAfterMark;
  }

  private async run(w: number, write: Write): Promise<void> {
    for (let i = 0; !this.stopped; i++) {
      const afterMark = this.marked;
      if (afterMark) this.sentAfterMark += 1;
      let answer: Awaited<ReturnType<Write>>;
      try {
        answer = await write(w, i);
      } catch {
        return; // the server is gone
      }
      if (answer.status !== 200) this.refused.push(answer.status);
      else if (afterMark) this.ackedAfterMark.push(...answer.acked!);
      else this.acked.push(...answer.acked!);
    }
  }
}

/** A JSON request to the server; throws when it is gone. */
export async function send(url: string, method: string, path: string, body: string | Uint8Array, headers: Record<string, string> = {}) {
  const res = await fetch(`${url}${path}`, { method, headers: { 'content-type': 'application/json', ...headers }, body });
  return { status: res.status, text: await res.text() };
}

/** How a body is sent: turned into bytes by `encode` (gzipSync...), with `headers` (its Content-Encoding). */
export interface Encoding {
  encode?: (body: string) => Uint8Array;
  headers?: Record<string, string>;
}

/** A PUT of a value given as JSON text: the write, if acknowledged. */
export async function putValue(url: string, key: string, value: string, encoding: Encoding = {}): ReturnType<Write> {
  const body = `{"value":${value}}`;
  const { status, text } = await send(url, 'PUT', `/v1/keys/${encodeURIComponent(key)}`, encoding.encode?.(body) ?? body, encoding.headers);
  return { status, acked: status === 200 ? [{ key, value, offset: (JSON.parse(text) as { offset: number }).offset }] : [] };
}

/** A POST /v1/records of sets whose values are given as JSON text: the writes, if acknowledged. */
export async function postValues(url: string, items: { key: string; value: string }[], encoding: Encoding = {}): ReturnType<Write> {
  const body = `{"records":[${items.map((item) => `{"key":${JSON.stringify(item.key)},"value":${item.value}}`).join(',')}]}`;
  const { status, text } = await send(url, 'POST', '/v1/records', encoding.encode?.(body) ?? body, encoding.headers);
  if (status !== 200) return { status };
  const { records } = JSON.parse(text) as { records: { offset: number }[] };
  return { status, acked: items.map((item, n) => ({ ...item, offset: records[n]!.offset })) };
}

/**
 * After a restart: the log holds offsets 1 to its head with none missing (no compaction
 * ran), every acknowledged write is at its offset with its value's very digits (read
 * from GET's raw text; each write has a key of its own), every record a reader was shown
 * is there as shown, and the next write gets an offset above all of them.
 */
export async function expectAllThere(url: string, acked: AckedWrite[], shown: WireRecord[] = []): Promise<void> {
  const records = await readAllChanges(url, 0);
  expect(records.map((r) => r.offset)).toEqual(records.map((_, i) => i + 1));
  const byOffset = new Map(records.map((record) => [record.offset, record]));
  for (const write of acked) expect(byOffset.get(write.offset)?.key, `offset ${write.offset}`).toBe(write.key);
  for (const record of shown) expect(byOffset.get(record.offset), `shown offset ${record.offset}`).toEqual(record);
  for (let from = 0; from < acked.length; from += 16) {
    await Promise.all(
      acked.slice(from, from + 16).map(async (write) => {
        const res = await fetch(`${url}/v1/keys/${encodeURIComponent(write.key)}`);
        expect(res.status, write.key).toBe(200);
        expect(await res.text()).toContain(`"value":${write.value},"offset":${write.offset},`);
      }),
    );
  }
  const next = await putValue(url, 'after-restart', '1');
  expect(next.acked?.[0]?.offset).toBe(records.length + 1);
}
