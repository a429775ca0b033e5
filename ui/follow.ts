// Follows the changes after an offset by long poll, each request the one the last answer
// names (`Link: rel="next"`), as the client library does: every page open at the same
// position asks the same URL, so a cache in front (the browser's own included) answers
// them together. A dropped request is asked again; nothing is missed or shown twice.
import type { changesSchema, Static } from '../src/contract/schemas.js';
import { errorOf, type Api, type ErrorBody, type LogRecord } from './api.js';

export type FollowState = 'connecting' | 'live' | 'retrying' | 'stopped';

export interface FollowHandlers {
  record(record: LogRecord): void;
  /** The reader moved on to `offset` (every page, empty ones included). */
  position?(offset: number): void;
  /** The changes cannot go on from where it is (410: compacted, or another epoch): reload and start over. */
  reset(error: ErrorBody): void;
  /** 401: the token is no longer accepted. */
  unauthorized(): void;
  state(state: FollowState, detail: string): void;
}

export interface FollowOptions {
  prefix: string;
  /** Start after this offset (the offset of the listing the reader holds). */
  after: number;
  /** Seconds a request waits at the head for a change. */
  waitSeconds?: number;
  /** First wait before asking again after a failure; doubled each time up to MAX_RETRY_MS. */
  retryMs?: number;
}

type ChangesPage = Static<(typeof changesSchema)['response'][200]>;

const MAX_RETRY_MS = 15_000;

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
    function done(): void {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
  });
}

export class ChangeFollower {
  private readonly stopper = new AbortController();
  private readonly retryMs: number;
  private readonly waitSeconds: number;
  /** The request to make next: the first one, then what each answer's Link names. */
  private next: URL;
  /** How many requests were answered. */
  pages = 0;

  constructor(
    private readonly api: Api,
    options: FollowOptions,
    private readonly handlers: FollowHandlers,
  ) {
    this.retryMs = options.retryMs ?? 1000;
    this.waitSeconds = options.waitSeconds ?? 30;
    // The first request does not wait: the page is live as soon as the position is accepted.
    this.next = new URL(api.url('v1/changes', { after: options.after, prefix: options.prefix }), location.href);
  }

  get stopped(): boolean {
    return this.stopper.signal.aborted;
  }

  start(): void {
    void this.run();
  }

  stop(): void {
    if (this.stopped) return;
    this.stopper.abort();
    this.handlers.state('stopped', 'stopped');
  }

  private async run(): Promise<void> {
    let failures = 0;
    this.handlers.state('connecting', 'connecting…');
    while (!this.stopped) {
      let outcome: 'more' | 'done';
      try {
        outcome = await this.ask();
        failures = 0;
      } catch {
        // Refused (5xx, 429), unreachable or cut: ask again, waiting longer each time.
        if (this.stopped) return;
        failures += 1;
        const wait = Math.min(MAX_RETRY_MS, this.retryMs * 2 ** (failures - 1));
        this.handlers.state('retrying', `connection lost; asking again in ${Math.ceil(wait / 1000)} s`);
        await sleep(wait, this.stopper.signal);
        continue;
      }
      if (outcome === 'done') return;
    }
  }

  /** One request: 'done' when the reader must not go on. */
  private async ask(): Promise<'more' | 'done'> {
    const res = await fetch(this.next, { headers: this.api.headers(), signal: this.stopper.signal });
    if (res.status === 401) {
      this.handlers.unauthorized();
      return 'done';
    }
    if (res.status === 410) {
      this.handlers.reset(await errorOf(res));
      return 'done';
    }
    if (!res.ok) throw new Error(`the changes answered ${res.status}`);
    const page = (await res.json()) as ChangesPage;
    if (this.stopped) return 'done';
    this.pages += 1;
    if (this.pages === 1) this.handlers.state('live', 'live');
    for (const record of page.records) this.handlers.record(record);
    this.handlers.position?.(page.next);
    const link = /^<([^>]+)>;\s*rel="next"/.exec(res.headers.get('link') ?? '')?.[1];
    if (link === undefined) throw new Error('the changes answer named no next request');
    // The Link's query on the page's own path to the API, which a proxy may have prefixed.
    this.next.search = new URL(link, location.href).search;
    // The first answer did not wait; from then on each request waits, as its Link keeps saying.
    if (this.pages === 1) this.next.searchParams.set('wait', String(this.waitSeconds));
    return 'more';
  }
}
