// watch() with a consumer the server keeps: resumes from its committed offset and commits
// the offsets the caller has handled, so that a restarted worker needs no file of its own
// and operators see its lag.
import type { Consumer, ConsumerCalls } from './consumers.js';
import { StatelogError } from './errors.js';
import { backoffDelay, DEFAULT_RETRY, sleep } from './retry.js';
import { retriable, watch, type ConsumerOption, type WatchEvent, type WatchOptions } from './watch.js';

/** Changes handled since the last commit are committed within this long, not one request each. */
const COMMIT_DELAY_MS = 1000;
/** The last commit, made once the caller has stopped the watch, gives up after this long. */
const FINAL_COMMIT_MS = 5000;

export const consumerOption = (given: string | ConsumerOption): ConsumerOption => (typeof given === 'string' ? { name: given } : given);

/**
 * The consumer's stored position (null: none yet), asked again while the server cannot be
 * reached as watch() reconnects, so that a worker started before its server waits for it.
 */
export async function storedPosition(client: ConsumerCalls, name: string, options: Pick<WatchOptions, 'signal' | 'retry' | 'onRetry'>): Promise<Consumer | null> {
  const policy = { ...DEFAULT_RETRY, ...options.retry };
  for (let attempt = 0; ; attempt++) {
    try {
      return await client.consumer(name, options.signal ? { signal: options.signal } : {});
    } catch (err) {
      if (!(err instanceof StatelogError) || !retriable(err) || options.signal?.aborted) throw err;
      const delay = backoffDelay(attempt, policy);
      options.onRetry?.(err, delay);
      await sleep(delay, options.signal);
    }
  }
}

export async function* consumerWatch<T>(client: ConsumerCalls, options: WatchOptions): AsyncGenerator<WatchEvent<T>, void, undefined> {
  const { name, hold, resume = true } = consumerOption(options.consumer!);
  const { signal } = options;
  const start: Partial<WatchOptions> = {};
  if (resume && options.after === undefined) {
    const stored = await storedPosition(client, name, options);
    // A consumer at 0 has handled nothing: a snapshot gives the state faster than the whole log.
    if (stored && stored.offset > 0) Object.assign(start, { after: stored.offset, epoch: stored.epoch, onReset: options.onReset ?? 'snapshot' });
  }
  let epoch = start.epoch ?? options.epoch;
  let committed = -1;
  /** The offset up to which the caller has handled everything: it asked for the event after. */
  let handled = -1;
  let failure: unknown;
  let commits = Promise.resolve();
  let timer: NodeJS.Timeout | undefined;
  const commit = (offset: number, within: AbortSignal | undefined): Promise<void> => {
    clearTimeout(timer);
    timer = undefined;
    commits = commits.then(async () => {
      if (offset <= committed || within?.aborted) return;
      try {
        await client.commitConsumer(name, offset, { epoch, ...(hold === undefined ? {} : { hold }), ...(within ? { signal: within } : {}) });
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
      if (event.type === 'reset') committed = handled = -1;
      yield event;
      // Asked for the next event: everything up to this one is handled.
      if (event.type === 'initialized' || event.type === 'progress') handled = event.offset;
      else if (event.type === 'record' && !event.snapshot) handled = event.record.offset;
      if (signal?.aborted) return;
      if (event.type === 'initialized' || event.type === 'progress') await commit(handled, signal);
      else if (event.type === 'record' && !event.snapshot) {
        timer ??= setTimeout(() => void commit(handled, signal), COMMIT_DELAY_MS);
        timer.unref?.();
      }
      if (failure) throw failure;
    }
  } finally {
    clearTimeout(timer);
    // Stopped (its signal, or the loop left): what was handled is committed now, so a worker
    // started next resumes right after it. The event a loop broke out on counts as not handled.
    if (failure === undefined && handled > committed) {
      await commit(handled, AbortSignal.timeout(FINAL_COMMIT_MS));
    }
  }
}
