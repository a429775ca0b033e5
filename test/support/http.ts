// A plain HTTP client for tests that need what supertest hides: methods and paths sent
// as given, and answers that never end (streams), read only up to their headers.
import { request as httpRequest, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Sent {
  method: string;
  path: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  /**
   * The answer may be an endless stream: on a 2xx, resolve at the headers and drop the
   * connection. Error answers are finite and read whole.
   */
  stream?: boolean;
}

export interface Received {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
  /** The body parsed as JSON, or undefined if it is not JSON. */
  json: unknown;
}

function parse(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

export function send(port: number, sent: Sent): Promise<Received> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      { host: '127.0.0.1', port, method: sent.method, path: sent.path, headers: sent.headers, agent: false },
      (res) => {
        const head = { status: res.statusCode ?? 0, headers: res.headers };
        if (sent.stream && head.status < 300) {
          res.destroy();
          return resolve({ ...head, text: '', json: undefined });
        }
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('error', reject);
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          resolve({ ...head, text, json: parse(text) });
        });
      },
    );
    req.on('error', reject);
    req.end(sent.body);
  });
}

export const bearer = (token: string): Record<string, string> => ({ authorization: `Bearer ${token}` });

/** The port a listening server was given. */
export function portOf(server: Server): number {
  return (server.address() as AddressInfo).port;
}
