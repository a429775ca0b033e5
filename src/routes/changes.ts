// GET /v1/changes: a page of the log after an offset, as a long poll when `wait` is given.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { checkEpoch, readFeed, type FeedPage } from '../feed/change-feed.js';
import { RepeatedWaiter } from '../feed/change-notifier.js';
import { checkPrefix } from '../contract/key-rules.js';
import { recordJson } from '../contract/render.js';
import { requestLifetime } from '../http/request-lifetime.js';
import { changesSchema } from '../contract/schemas.js';
import type { AppServices } from '../services.js';
import { sendJsonText } from '../writes/write-request.js';

/**
 * A page also ends once it holds this many characters of keys and values (and always
 * holds one record): like Kafka's fetch.max.bytes, it keeps an answer of large values
 * from growing with `limit`.
 */
export const CHANGES_PAGE_CHARS = 8 * 1024 * 1024;

function pageJson(page: FeedPage, epoch: string): string {
  const records = page.records.map(recordJson).join(',');
  return `{"records":[${records}],"next":${page.next},"head":${page.head},"epoch":${JSON.stringify(epoch)}}`;
}

export const changesRoutes: FastifyPluginAsyncTypebox<{ services: AppServices }> = async (app, { services }) => {
  const { store, notifier, lifecycle, metrics } = services;

  app.get('/v1/changes', { schema: changesSchema }, async (req, reply) => {
    const { after, limit, wait, epoch } = req.query;
    const prefix = checkPrefix(req.query.prefix);
    checkEpoch(epoch, store.epoch);
    const deadline = Date.now() + wait * 1000;
    const query = { after, prefix, limit, maxChars: CHANGES_PAGE_CHARS };

    let page = await readFeed(store, query);
    if (page.records.length === 0 && wait > 0) {
      const lifetime = requestLifetime(reply, lifecycle.shutdown);
      const waiter = new RepeatedWaiter(notifier, lifetime.signal);
      const closed = metrics.openStream('long_poll', req.raw);
      try {
        // Woken by every commit; commits of other prefixes just mean another look.
        while (page.records.length === 0 && !lifetime.signal.aborted && Date.now() < deadline) {
          if (notifier.head <= page.head) await waiter.wait(deadline);
          page = await readFeed(store, query);
        }
      } finally {
        waiter.close();
        lifetime.dispose();
        closed();
      }
    }
    return sendJsonText(reply, pageJson(page, store.epoch));
  });
};
