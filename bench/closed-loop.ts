// A closed-loop load generator: `concurrency` workers each send the next request as soon
// as the last one is answered, for `seconds`. Used for every system in a comparison, so
// each side gets the same client behaviour.
import hdr from 'hdr-histogram-js';

export interface LoopResult {
  requests: number;
  rps: number;
  p50: number;
  p99: number;
  errors: number;
}

export async function closedLoop(
  concurrency: number,
  seconds: number,
  operation: (worker: number, i: number) => Promise<void>,
): Promise<LoopResult> {
  const histogram = hdr.build({ lowestDiscernibleValue: 1, highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: 3 });
  const deadline = performance.now() + seconds * 1000;
  let requests = 0;
  let errors = 0;
  const worker = async (w: number) => {
    for (let i = 0; performance.now() < deadline; i++) {
      const start = performance.now();
      try {
        await operation(w, i);
        histogram.recordValue(Math.round((performance.now() - start) * 1000)); // microseconds
        requests++;
      } catch {
        errors++;
      }
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: concurrency }, (_, w) => worker(w)));
  const elapsed = (performance.now() - started) / 1000;
  return {
    requests,
    rps: requests / elapsed,
    p50: histogram.getValueAtPercentile(50) / 1000,
    p99: histogram.getValueAtPercentile(99) / 1000,
    errors,
  };
}
