// The bare relays' start and stop: they print the line the harness waits for, as statelog does.
import type http from 'node:http';

export function listenBare(server: http.Server): void {
  server.listen(Number(process.env.PORT ?? 0), process.env.HOST ?? '127.0.0.1', () => {
    const { port } = server.address() as { port: number };
    console.log(`Server listening at http://127.0.0.1:${port}`);
  });
  process.on('SIGTERM', () => process.exit(0));
}
