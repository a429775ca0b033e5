// GET /v1/changes: a page of the log after an offset, as a long poll when `wait` is given.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { checkEpoch, type FeedPage } from '../feed/change-feed.js';
import { parseGenerationToken } from '../contract/lineage.js';
import { RepeatedWaiter } from '../feed/change-notifier.js';
import { recordJson } from '../contract/render.js';
import { TailPages, type SharedPagesBudget } from '../feed/tail-pages.js';
import type { StoredRecord } from '../store/log-store.js';
import { cacheScope, nextChanges } from '../http/caching.js';
import { requestLifetime } from '../http/request-lifetime.js';
import { requestFilter, watchScope } from '../http/scope.js';
import type { Authenticator } from '../http/auth.js';
import type { ScopeChange } from '../contract/key-scope.js';
import { changesSchema } from '../contract/schemas.js';
import type { Config } from '../config.js';
import type { ChangeNotifier } from '../feed/change-notifier.js';
import type { TailWindow } from '../feed/tail-window.js';
import type { WatcherSlots } from '../feed/watcher-slots.js';
import type { Lifecycle } from '../http/lifecycle.js';
import { sendJsonText } from '../http/reply.js';
import type { Metrics } from '../metrics.js';
import type { LogStore } from '../store/log-store.js';

/** A page also ends past this many characters (one record at least), as Kafka's fetch.max.bytes. */
export const CHANGES_PAGE_CHARS = 8 * 1024 * 1024;

const recordsJson = (records: StoredRecord[]): string => records.map(recordJson).join(',');

function pageJson(page: FeedPage, epoch: string, records = recordsJson(page.records)): string {
  return `{"records":[${records}],"next":${page.next},"head":${page.head},"epoch":${JSON.stringify(epoch)}}`;
}

export interface ChangesRouteOptions {
  store: LogStore;
  notifier: ChangeNotifier;
  tailWindow: TailWindow;
  watchers: WatcherSlots;
  lifecycle: Lifecycle;
  metrics: Metrics;
  config: Pick<Config, 'tokens' | 'tokensFile'>;
  /** The credentials in force (null: auth off): held long polls are checked again at each reload. */
  auth: Authenticator | null;
  sharedPages: SharedPagesBudget;
}

export const changesRoutes: FastifyPluginAsyncTypebox<ChangesRouteOptions> = async (app, options) => {
  const { store, notifier, tailWindow, watchers, lifecycle, metrics, config, auth, sharedPages } = options;
  const scope = cacheScope(config);
  // Polls at one position and filter share one page and one rendering while the head stays.
  const tail = new TailPages(store, tailWindow, recordsJson, { budget: sharedPages });

  app.get('/v1/changes', { schema: changesSchema, config: { scope: 'filter' } }, async (req, reply) => {
    const { after, limit, wait, epoch, cursor } = req.query;
    let filter = requestFilter(req, req.query.prefix, req.query.key);
    checkEpoch(epoch, store.epoch);
    const deadline = Date.now() + wait * 1000;
    const gen = req.query.gen === undefined ? undefined : parseGenerationToken(req.query.gen)!;

    // A long poll is checked again at each reload of the credentials: refused, it answers the refusal at
    // once; narrowed, it answers at once what its new scope shows; a page read under the old scope is dropped.
    let change: ScopeChange | null = null;
    let narrowed = false;
    let waiter: RepeatedWaiter | null = null;
    const asked = { prefix: req.query.prefix, key: req.query.key };
    const unwatch = wait > 0 ? watchScope(auth, req, asked, filter, (changed) => ((change = changed), waiter?.wake())) : () => {};
    const readAt = async (from: number, gone?: () => boolean) => {
      for (;;) {
        if (change !== null) {
          const changed: ScopeChange = change;
          change = null;
          if ('refused' in changed) throw changed.refused;
          filter = changed.narrowed;
          narrowed = true;
        }
        const read = await tail.read({ ...filter, after: from, limit, maxChars: CHANGES_PAGE_CHARS, gen }, gone);
        if (change === null) return read;
      }
    };

    try {
      // A client that left while its read waited for its turn is not read for.
      const gone = (): boolean => reply.raw.destroyed || req.raw.socket.destroyed;
      let { page, text: rendered, behind } = await readAt(after, gone);
      // Waits while a read from `from` finds nothing new: at the head, or below a head the node
      // knew that the database no longer has (a failover lost its last commits), until a commit
      // passes it. A filtered read that stopped at its scan bound moved on: it answers at once
      // with the position it reached, and the reader continues from there.
      const nothingNew = (from: number) => page.records.length === 0 && (page.next >= page.head || page.next <= from);
      if (nothingNew(after) && wait > 0 && !narrowed) {
        const release = watchers.acquireFor(req);
        const lifetime = requestLifetime(reply, lifecycle.shutdown);
        waiter = new RepeatedWaiter(notifier, lifetime.signal);
        const closed = metrics.openStream('long_poll', req.raw);
        try {
          // Every commit wakes it; another look reads only what was committed since the last.
          let from = after;
          while (!lifetime.signal.aborted && Date.now() < deadline) {
            if (change === null) {
              if (behind) await waiter.waitAfterEmptyRead(deadline);
              else if (notifier.head <= page.next) await waiter.wait(deadline);
            }
            if (lifetime.signal.aborted) break;
            from = page.next;
            ({ page, text: rendered, behind } = await readAt(from));
            if (narrowed || !nothingNew(from)) break;
          }
        } finally {
          waiter.close();
          lifetime.dispose();
          closed();
          release();
        }
      }
      // Every answer names the next request, so that followers at one position ask one URL a cache can answer.
      const position = { after, epoch: store.epoch, gen: page.gen, epochGiven: epoch !== undefined, ...asked, limit, wait, cursor };
      const { link, cacheControl } = nextChanges(position, page.next, scope);
      reply.headers({ link: `<${link}>; rel="next"`, 'cache-control': cacheControl });
      return sendJsonText(reply, pageJson(page, store.epoch, rendered));
    } finally {
      unwatch();
    }
  });
};
