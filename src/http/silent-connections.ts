// At shutdown, every connection with no request in progress is closed at once. Node
// closes idle keep-alive connections itself, but not one that was opened and has sent
// nothing yet (clients open spare connections), and server.close() would wait for it
// until the headers timeout.
import type { Server } from 'node:http';
import type { Socket } from 'node:net';
import { Server as TlsServer } from 'node:tls';

/**
 * The response a socket is answering, set by node from the request's arrival until its
 * answer is written (node's own closeIdleConnections reads it the same way): a request
 * in progress costs no listener of ours.
 */
type HttpSocket = Socket & { _httpMessage?: object | null };

export function trackConnections(server: Server): { closeSilent(): void } {
  const open = new Set<HttpSocket>();
  // Over HTTPS a request's socket is the TLS socket, which exists once the handshake is
  // done (one that never finishes it is ended by the handshake timeout, see app.ts).
  const opened = (server as unknown) instanceof TlsServer ? 'secureConnection' : 'connection';
  server.on(opened, (socket: HttpSocket) => {
    open.add(socket);
    socket.once('close', () => open.delete(socket));
  });
  return {
    closeSilent() {
      for (const socket of open) if (!socket._httpMessage) socket.destroy();
    },
  };
}
