// A byte stream whose chunks are made on demand: a slow client slows the producer, not fills memory.
import type { Socket } from 'node:net';
import { Readable } from 'node:stream';

export interface PullStreamOptions {
  highWaterMark?: number;
  /** Cut by `cut` when no byte reached the kernel's buffers for `ms` while data waits: a trickle never holds a slot for ever. */
  stalled?: { ms: number; socket: Socket; cut: () => void };
}

/** `produce` gives the next chunk (null: the end), never called again before it settles; `release` runs once, however it ends. */
export function pullStream(
  produce: () => Promise<string | Buffer | null>,
  release: () => void,
  options: PullStreamOptions = {},
): Readable {
  /** Whether a chunk made waits in the stream's buffer, no read() asked for since. */
  let unread = false;
  const stalled = options.stalled;
  let watchdog: NodeJS.Timeout | undefined;
  if (stalled) {
    const { socket } = stalled;
    // Bytes the kernel took: what was handed to the socket, less what still waits in it.
    const taken = (): number => socket.bytesWritten - socket.writableLength;
    let lastTaken = taken();
    let movedAt = Date.now();
    watchdog = setInterval(
      () => {
        const now = Date.now();
        const waiting = unread || socket.writableLength > 0;
        if (taken() !== lastTaken || !waiting) {
          lastTaken = taken();
          movedAt = now;
        } else if (now - movedAt >= stalled.ms) {
          clearInterval(watchdog);
          stalled.cut();
        }
      },
      Math.max(50, Math.min(1000, stalled.ms / 4)),
    ).unref();
  }
  const stream: Readable = new Readable({
    highWaterMark: options.highWaterMark ?? 64 * 1024,
    read() {
      unread = false;
      void pull();
    },
    destroy(err, callback) {
      clearInterval(watchdog);
      release();
      callback(err);
    },
  });
  stream.once('end', () => clearInterval(watchdog));
  async function pull(): Promise<void> {
    try {
      let chunk: string | Buffer | null;
      // An empty chunk must not be pushed: push('') asks for no further read().
      do chunk = await produce();
      while (chunk?.length === 0 && !stream.destroyed);
      if (stream.destroyed) return;
      unread = true;
      stream.push(chunk);
    } catch (err) {
      stream.destroy(err as Error);
    }
  }
  return stream;
}
