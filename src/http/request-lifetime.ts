// How long a long poll or a stream lives: until the client goes away or the server
// starts shutting down, whichever comes first.
import type { FastifyReply } from 'fastify';

export interface RequestLifetime {
  /** Aborted when the client disconnects or the server shuts down. */
  readonly signal: AbortSignal;
  /** Removes the listeners; call once the answer is complete. */
  dispose(): void;
}

export function requestLifetime(reply: FastifyReply, shutdown: AbortSignal): RequestLifetime {
  const controller = new AbortController();
  const abort = (): void => controller.abort();
  // The response closes early when the connection does (the client went away).
  const res = reply.raw;
  res.once('close', abort);
  // The server keeps half-closed connections open to answer them (app.ts), and a client
  // that closes its connection only shows as a FIN until the next write fails: for a
  // wait that may last minutes, the end of what the client sends means it is gone.
  const socket = reply.request.raw.socket;
  socket.once('end', abort);
  if (socket.readableEnded) abort();
  shutdown.addEventListener('abort', abort, { once: true });
  if (shutdown.aborted) abort();
  return {
    signal: controller.signal,
    dispose() {
      res.off('close', abort);
      socket.off('end', abort);
      shutdown.removeEventListener('abort', abort);
    },
  };
}
