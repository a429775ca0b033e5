// A byte stream whose chunks are made on demand. Readable calls read() only while its
// buffer is below highWaterMark, and pipe() stops reading while the socket needs
// draining, so a slow client slows the producer down instead of filling memory.
import { Readable } from 'node:stream';

/**
 * `produce` gives the next chunk, or null at the end; it is never called again before
 * its promise settles. `release` runs once, when the stream ends, fails or is
 * destroyed (a client that disconnects destroys it).
 */
export function pullStream(produce: () => Promise<string | Buffer | null>, release: () => void, highWaterMark = 64 * 1024): Readable {
  const stream: Readable = new Readable({
    highWaterMark,
    read() {
      void pull();
    },
    destroy(err, callback) {
      release();
      callback(err);
    },
  });
  async function pull(): Promise<void> {
    try {
      let chunk: string | Buffer | null;
      // An empty chunk must not be pushed: push('') asks for no further read().
      do chunk = await produce();
      while (chunk?.length === 0 && !stream.destroyed);
      if (!stream.destroyed) stream.push(chunk);
    } catch (err) {
      stream.destroy(err as Error);
    }
  }
  return stream;
}
