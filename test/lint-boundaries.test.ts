// The import boundaries between the parts are enforced by lint (eslint.config.js): a
// breach in each part fails, and the imports each part is allowed pass.
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';

const eslint = new ESLint();

async function breaches(filePath: string, code: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath });
  return result!.messages.filter((m) => m.ruleId === 'no-restricted-imports').map((m) => m.message);
}

describe('import boundaries', () => {
  it.each([
    ['packages/client/src/client.ts', "import { ApiError } from '../../../src/http/error-handler.js';"],
    ['packages/client/src/client.ts', "import { SqliteStore } from '../../../src/store/sqlite/store.js';"],
    ['packages/client/src/client.ts', "import { renderEntry } from '../../../src/contract/render.js';"],
    ['packages/client/src/client.ts', "import { startApp } from '../../../test/support/helpers.js';"],
    ['packages/client/src/client.ts', "import Fastify from 'fastify';"],
    ['packages/client/src/client.ts', "import Database from 'better-sqlite3';"],
    ['packages/client/src/watch.ts', "import type { StatelogClient } from './client.js';"],
    ['packages/client/src/pages.ts', "import { watch } from './watch.js';"],
    ['packages/client/src/pages.ts', "import type { StatelogClient } from './client.js';"],
    ['packages/client/src/consumer-watch.ts', "import type { StatelogClient } from './client.js';"],
    ['packages/client/src/consumers.ts', "import { consumerWatch } from './consumer-watch.js';"],
    ['packages/client/src/watch.ts', "import type { ConsumerCalls } from './consumers.js';"],
    ['packages/client/src/watch.ts', "import Fastify from 'fastify';"],
    ['src/store/sqlite/store.ts', "import { errorHandler } from '../../http/error-handler.js';"],
    ['src/store/log-store.ts', "import { keyRoutes } from '../routes/keys.js';"],
    ['src/contract/schemas.ts', "import { Authenticator } from '../http/auth.js';"],
    ['src/contract/render.ts', "import type { StoredEntry } from '../store/log-store.js';"],
    ['src/routes/keys.ts', "import { startApp } from '../../test/support/helpers.js';"],
    ['src/writes/write-batcher.ts', "import { sendAnswer } from '../http/reply.js';"],
    ['src/http/lifecycle.ts', "import type { Services } from '../services.js';"],
    ['src/http/parsing.ts', "import { keyRoutes } from '../routes/keys.js';"],
    ['src/http/error-handler.ts', "import { postgresErrorKinds } from '../store/postgres/errors.js';"],
    ['src/writes/expirer.ts', "import type { Services } from '../services.js';"],
    ['src/writes/idempotency.ts', "import type { FastifyRequest } from 'fastify';"],
    ['src/store/sqlite/store.ts', "import { SharedSnapshots } from '../../snapshot/shared-snapshots.js';"],
    ['src/writes/write-batcher.ts', "import { ChangeNotifier } from '../feed/change-notifier.js';"],
    ['src/http/auth.ts', "import { fillLog } from '../../harness/fill-log.js';"],
    ['src/feed/change-stream-source.ts', "import { sseEvent } from '../http/sse.js';"],
    ['src/feed/change-feed.ts', "import { changeRoutes } from '../routes/changes.js';"],
    ['src/feed/tail-pages.ts', "import type { Services } from '../services.js';"],
    ['src/feed/watcher-slots.ts', "import type { FastifyRequest } from 'fastify';"],
    ['src/feed/change-feed.ts', "import { SqliteStore } from '../store/sqlite/store.js';"],
    ['src/feed/change-notifier.ts', "import type { WriteBatcher } from '../writes/write-batcher.js';"],
    ['src/snapshot/shared-snapshots.ts', "import type { TailPages } from '../feed/tail-pages.js';"],
    ['src/snapshot/snapshot-spool.ts', "import { pullStream } from '../http/pull-stream.js';"],
    ['src/snapshot/shared-snapshots.ts', "import type { Metrics } from '../metrics.js';"],
    ['src/snapshot/snapshot-spool.ts', "import type { Pool } from 'pg';"],
    ['src/snapshot/scoped-reads.ts', "import { keyRoutes } from '../routes/keys.js';"],
    ['src/app.ts', "import { lib } from '../bench/shared/lib.js';"],
    ['src/app.ts', "import { startServer } from '../harness/server-process.js';"],
    ['bench/shared/lib.ts', "import { currentState } from '../../test/support/store-helpers.js';"],
    ['bench/shared/lib.ts', "import { startApp } from '../../test/support/helpers.js';"],
    ['harness/fill-log.ts', "import { startApp } from '../test/support/helpers.js';"],
    ['ui/api.ts', "import { buildApp } from '../src/app.js';"],
  ])('%s may not: %s', async (file, code) => {
    expect(await breaches(file, code)).toHaveLength(1);
  });

  it.each([
    ['packages/client/src/errors.ts', "import type { ErrorCode } from '../../../src/contract/errors.js';"],
    ['packages/client/src/client.ts', "import type { Static } from '../../../src/contract/schemas.js';"],
    ['packages/client/src/client.ts', "import { StatelogError } from './errors.js';"],
    ['packages/client/src/sse.ts', "import { createParser } from 'eventsource-parser';"],
    ['packages/client/src/watch.ts', "import type { PageReader } from './pages.js';"],
    ['packages/client/src/client.ts', "import { watch } from './watch.js';"],
    ['packages/client/src/consumer-watch.ts', "import type { ConsumerCalls } from './consumers.js';"],
    ['packages/client/src/state-mirror.ts', "import { storedPosition } from './consumer-watch.js';"],
    ['packages/client/src/pages.ts', "import { DEFAULT_CHANGES_LIMIT } from '../../../src/contract/schemas.js';"],
    ['src/store/sqlite/store.ts', "import type { StoredEntry } from '../log-store.js';"],
    ['src/contract/render.ts', "import type { StoredEntry } from './model.js';"],
    ['src/store/write-plan.ts', "import type { WriteOutcome } from '../contract/model.js';"],
    ['ui/api.ts', "import type { Entry } from '../src/contract/schemas.js';"],
    ['bench/shared/lib.ts', "import { fillLog } from '../../harness/fill-log.js';"],
    ['test/support/store-access.ts', "import { fillLog } from '../../harness/fill-log.js';"],
    ['src/routes/keys.ts', "import { ApiError } from '../contract/errors.js';"],
    ['src/writes/write-batcher.ts', "import type { LogStore } from '../store/log-store.js';"],
    ['src/http/error-handler.ts', "import { storeErrorKind } from '../store/store-errors.js';"],
    ['src/http/write-request.ts', "import type { WriteBatcher } from '../writes/write-batcher.js';"],
    ['src/writes/idempotency.ts', "import { ApiError } from '../contract/errors.js';"],
    ['src/feed/change-stream-source.ts', "import { SnapshotDigest } from '../snapshot/snapshot-digest.js';"],
    ['src/feed/change-feed.ts', "import type { LogStore } from '../store/log-store.js';"],
    ['src/feed/change-feed.ts', "import { ApiError } from '../contract/errors.js';"],
    ['src/snapshot/shared-snapshots.ts', "import type { LogStore } from '../store/log-store.js';"],
    ['src/snapshot/slots.ts', "import { ApiError } from '../contract/errors.js';"],
    ['src/http/error-handler.ts', "import { ReaderGone } from '../feed/read-turns.js';"],
  ])('%s may: %s', async (file, code) => {
    expect(await breaches(file, code)).toEqual([]);
  });
});
