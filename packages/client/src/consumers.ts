// The consumer calls: positions the server keeps for groups of workers (GET, PUT, DELETE
// /v1/consumers/{name}), on top of the requests of pages.ts. Below both the client and
// consumerWatch(), which resumes a watch from one and commits to it.
import type { Consumer as ConsumerSchema, listConsumersSchema, Static } from '../../../src/contract/schemas.js';
import { StatelogError } from './errors.js';
import { PageReader } from './pages.js';

/** A position the server keeps for a group of workers, with the head's distance from it. */
export type Consumer = Static<typeof ConsumerSchema>;
export type ConsumerList = Static<(typeof listConsumersSchema)['response'][200]>;

export interface ConsumerCommitOptions {
  /** The epoch `offset` belongs to: another one is refused (410 epoch_changed). */
  epoch?: string;
  /** Allows a position behind the committed one (else 409 conflict). */
  rewind?: boolean;
  /** Keep the delete markers above the position from compaction (the server bounds it); absent: unchanged. */
  hold?: boolean;
  /** Commit only if the consumer stands at this offset, or ('*') exists. */
  ifMatch?: number | '*';
  signal?: AbortSignal;
}

const consumerPath = (name: string) => `/v1/consumers/${encodeURIComponent(name)}`;

export class ConsumerCalls extends PageReader {
  /** The consumer of this name (this token's own, with a scoped token); null when there is none. */
  async consumer(name: string, options: { signal?: AbortSignal } = {}): Promise<Consumer | null> {
    try {
      return (await this.json({ method: 'GET', path: consumerPath(name), retry: true, ...options })) as Consumer;
    } catch (err) {
      if (err instanceof StatelogError && err.code === 'not_found') return null;
      throw err;
    }
  }

  async consumers(options: { signal?: AbortSignal } = {}): Promise<ConsumerList> {
    return (await this.json({ method: 'GET', path: '/v1/consumers', retry: true, ...options })) as ConsumerList;
  }

  /** Commits a position: forward only unless `rewind`. Retried as reads are: a repeated commit changes nothing. */
  async commitConsumer(name: string, offset: number, options: ConsumerCommitOptions = {}): Promise<Consumer> {
    const { ifMatch, signal, ...rest } = options;
    const headers: Record<string, string> = ifMatch === undefined ? {} : { 'if-match': ifMatch === '*' ? '*' : `"${ifMatch}"` };
    return (await this.json({ method: 'PUT', path: consumerPath(name), body: { offset, ...rest }, headers, retry: true, signal })) as Consumer;
  }

  /** Deletes a consumer (and its hold); false when there was none. */
  async deleteConsumer(name: string, options: { ifMatch?: number; signal?: AbortSignal } = {}): Promise<boolean> {
    const headers: Record<string, string> = options.ifMatch === undefined ? {} : { 'if-match': `"${options.ifMatch}"` };
    try {
      await this.send({ method: 'DELETE', path: consumerPath(name), headers, retry: true, signal: options.signal });
      return true;
    } catch (err) {
      if (err instanceof StatelogError && err.code === 'not_found') return false;
      throw err;
    }
  }
}
