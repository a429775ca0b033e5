// At shutdown, connections that sent nothing yet (clients open spares) are closed: Node closes idle
// keep-alive ones itself, and server.close() would wait for these until the headers timeout.
import type { Server } from 'node:http';
import type { Socket } from 'node:net';
import { Server as TlsServer } from 'node:tls';

export function trackConnections(server: Server): { closeSilent(): void } {
  const requestsInProgress = new Map<Socket, number>();
  // Over HTTPS a request's socket is the TLS socket, which exists once the handshake is
  // done (one that never finishes it is ended by the handshake timeout, see app.ts).
  const opened = (server as unknown) instanceof TlsServer ? 'secureConnection' : 'connection';
  server.on(opened, (socket: Socket) => {
    requestsInProgress.set(socket, 0);
    socket.once('close', () => requestsInProgress.delete(socket));
  });
  server.on('request', (req, res) => {
    const socket = req.socket;
    requestsInProgress.set(socket, (requestsInProgress.get(socket) ?? 0) + 1);
    res.once('close', () => {
      if (requestsInProgress.has(socket)) requestsInProgress.set(socket, requestsInProgress.get(socket)! - 1);
    });
  });
  return {
    closeSilent() {
      for (const [socket, requests] of requestsInProgress) if (requests === 0) socket.destroy();
    },
  };
}
