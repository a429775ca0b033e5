// SocketBuffers, the snapshot route's send buffers: a buffer is used again only once the
// socket's completed writes cover its chunk (with room for the response's head and the
// chunks' framing), never while the socket may still hold it.
import type { Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import { SocketBuffers } from '../src/http/socket-buffers.js';

/** A socket's counters: handed to it, and still waiting in it. */
function fakeSocket(bytesWritten = 0) {
  return { bytesWritten, writableLength: 0 };
}

describe('SocketBuffers', () => {
  it('uses a buffer again once the kernel has taken its chunk, and a new one before', () => {
    // Bytes of an earlier response on the same connection are not this body's.
    const socket = fakeSocket(1_000_000);
    const buffers = new SocketBuffers(socket as unknown as Socket, 2, 1024);
    const first = buffers.next();
    buffers.sent(1024);
    const second = buffers.next();
    buffers.sent(1024);
    expect(second).not.toBe(first);

    // Handed to the socket, but still waiting in it: the first slot gets a new buffer.
    socket.bytesWritten += 200_000;
    socket.writableLength = 200_000;
    const third = buffers.next();
    expect(third).not.toBe(first);
    buffers.sent(1024);

    // All taken by the kernel: the second slot's buffer comes back.
    socket.writableLength = 0;
    expect(buffers.next()).toBe(second);
    expect(buffers.sent(10)).toHaveLength(10);
  });
});
