// Buffers for a response body, reused once the socket has handed their bytes to the kernel: fresh ones
// would be external memory waiting long for a GC, strings a decoding and encoding of every byte.
import type { Socket } from 'node:net';

/** Room for the socket's bytes besides a chunk's: the response's head and each chunk's framing. */
const HEAD_ROOM = 64 * 1024;
const FRAMING = 16;

export class SocketBuffers {
  private readonly slots: { buffer: Buffer; end: number }[] = [];
  private at = 0;
  private body = 0;
  private chunks = 0;
  private readonly before: number;

  constructor(
    private readonly socket: Socket,
    private readonly count: number,
    private readonly size: number,
  ) {
    this.before = socket.bytesWritten;
  }

  /** A buffer to fill with the next chunk; `sent` must follow before the next call. */
  next(): Buffer {
    let slot = this.slots[this.at];
    // A slot whose bytes the kernel may not have yet is left to its holders: a new one.
    if (slot === undefined || this.taken() < slot.end) {
      slot = { buffer: Buffer.allocUnsafe(this.size), end: Number.POSITIVE_INFINITY };
      this.slots[this.at] = slot;
    }
    slot.end = Number.POSITIVE_INFINITY;
    return slot.buffer;
  }

  sent(bytes: number): Buffer {
    const slot = this.slots[this.at]!;
    this.body += bytes;
    this.chunks += 1;
    // Once the kernel has taken this many of the socket's bytes, it has all of this chunk.
    slot.end = this.body + HEAD_ROOM + FRAMING * this.chunks;
    this.at = (this.at + 1) % this.count;
    return slot.buffer.subarray(0, bytes);
  }

  private taken(): number {
    return this.socket.bytesWritten - this.socket.writableLength - this.before;
  }
}
