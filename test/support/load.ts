// Load for tests of load shedding: the app runs in the test's process, so saturating
// this event loop saturates the server's.

/** Keeps the event loop busy, letting it turn briefly between slices, until stopped. */
export function saturate(sliceMs: number): { stop(): Promise<void> } {
  let running = true;
  const done = (async () => {
    while (running) {
      const end = performance.now() + sliceMs;
      while (performance.now() < end) {
        // busy: nothing else runs on this thread meanwhile
      }
      await new Promise((resolve) => setImmediate(resolve));
    }
  })();
  return {
    async stop() {
      running = false;
      await done;
    },
  };
}

/** Asks until `accept` holds for an answer, or fails after `timeoutMs`. */
export async function askUntil<T>(ask: () => PromiseLike<T>, accept: (answer: T) => boolean, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const answer = await ask();
    if (accept(answer)) return answer;
    if (Date.now() > deadline) throw new Error(`no accepted answer in ${timeoutMs} ms; last: ${JSON.stringify(answer)}`);
  }
}
