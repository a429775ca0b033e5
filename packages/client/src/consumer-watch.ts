// watch() with a consumer the server keeps: resumes from its committed offset and commits
// the offsets the caller has handled, so that a restarted worker needs no file of its own
// and operators see its lag.
import type { StatelogClient } from './client.js';
import { StatelogError } from './errors.js';
import { watch, type WatchEvent, type WatchOptions } from './watch.js';

/** Changes handled since the last commit are committed within this long, not one request each. */
const COMMIT_DELAY_MS = 1000;

export async function* consumerWatch<T>(client: StatelogClient, options: WatchOptions): AsyncGenerator<WatchEvent<T>, void, undefined> {
  const given = options.consumer!;
  const { name, hold, resume = true } = typeof given === 'string' ? { name: given } : given;
  const { signal } = options;
  const start: Partial<WatchOptions> = {};
  if (resume && options.after === undefined) {
    const stored = await client.consumer(name, { signal });
    // A consumer at 0 has handled nothing: a snapshot gives the state faster than the whole log.
    if (stored && stored.offset > 0) Object.assign(start, { after: stored.offset, epoch: stored.epoch, onReset: options.onReset ?? 'snapshot' });
  }
  let epoch = start.epoch ?? options.epoch;
  let committed = -1;
  /** The last change the caller has handled. */
  let handled = -1;
  let failure: unknown;
  let commits = Promise.resolve();
  let timer: NodeJS.Timeout | undefined;
  const commit = (offset: number): Promise<void> => {
    clearTimeout(timer);
    timer = undefined;
    commits = commits.then(async () => {
      if (offset <= committed || signal?.aborted) return;
      try {
        await client.commitConsumer(name, offset, { epoch, ...(hold === undefined ? {} : { hold }), signal });
        committed = offset;
      } catch (err) {
        // Another epoch: the watch meets it too and starts over. Behind: another worker of the
        // group is further on. Other failures end the watch.
        if (!(err instanceof StatelogError && (err.code === 'epoch_changed' || err.code === 'conflict'))) failure ??= err;
      }
    });
    return commits;
  };
  try {
    for await (const event of watch<T>(client, { ...options, ...start })) {
      if (event.type === 'initialized') epoch = event.epoch;
      // A new snapshot's offset may be below the old position only in a new epoch, which starts at 0.
      if (event.type === 'reset') committed = -1;
      yield event;
      // Asked for the next event: everything up to this one is handled.
      if (signal?.aborted) return;
      if (event.type === 'initialized' || event.type === 'progress') await commit(event.offset);
      else if (event.type === 'record' && !event.snapshot) {
        handled = event.record.offset;
        timer ??= setTimeout(() => void commit(handled), COMMIT_DELAY_MS);
        timer.unref?.();
      }
      if (failure) throw failure;
    }
  } finally {
    clearTimeout(timer);
  }
}
