// Retries with jittered exponential backoff, for failures that did not reach a decision:
// connection errors, and 503 or 429 answers (which carry Retry-After).

export interface RetryPolicy {
  /** Attempts after the first. */
  retries: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { retries: 5, baseDelayMs: 100, maxDelayMs: 5_000 };

/** "Full jitter": a random delay up to the exponential bound, so retrying clients spread out. */
export function backoffDelay(attempt: number, policy: RetryPolicy, retryAfterSeconds?: number): number {
  const bound = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** attempt);
  const jittered = Math.random() * bound;
  return retryAfterSeconds === undefined ? jittered : Math.max(retryAfterSeconds * 1000, jittered);
}

export const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });

/**
 * Errors from fetch itself (it rejects with a TypeError whatever the network did): the
 * request may or may not have reached the server.
 */
export function isConnectionError(err: unknown): boolean {
  return err instanceof TypeError;
}
