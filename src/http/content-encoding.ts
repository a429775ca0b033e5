// Request bodies' Content-Encoding: gzip, deflate and br decoded as they arrive, any other refused (415);
// the limit applies to the decoded body, so a small compressed body never inflates gigabytes.
import type { Readable } from 'node:stream';
import { Transform } from 'node:stream';
import { createBrotliDecompress, createGunzip, createInflate } from 'node:zlib';
import type { FastifyRequest } from 'fastify';
import { ApiError } from '../contract/errors.js';

const DECODERS: Record<string, () => Transform> = {
  gzip: createGunzip,
  'x-gzip': createGunzip,
  deflate: createInflate,
  br: createBrotliDecompress,
};

/** The codings the server decodes, as a refused client is told. */
export const DECODED_ENCODINGS = ['identity', ...Object.keys(DECODERS)];

function hasBody(req: FastifyRequest): boolean {
  const length = req.headers['content-length'];
  return req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

/** The body as the parser reads it (a preParsing hook), decoded, `receivedEncodedLength` kept for fastify. */
export function decodedBody(req: FastifyRequest, payload: Readable, limit: number): Readable {
  const header = req.headers['content-encoding'];
  if (header === undefined || !hasBody(req)) return payload;
  const coding = header.trim().toLowerCase();
  if (coding === '' || coding === 'identity') return payload;
  const make = DECODERS[coding];
  if (!make) {
    throw new ApiError(
      'unsupported_media_type',
      `Content-Encoding "${header}" is not decoded here; send the body as one of ${DECODED_ENCODINGS.join(', ')}`,
      { encodings: DECODED_ENCODINGS },
    );
  }
  const decoder = make();
  let decoded = 0;
  const output = Object.assign(
    new Transform({
      transform(chunk: Buffer, _encoding, callback) {
        decoded += chunk.length;
        if (decoded > limit) return callback(tooLarge(limit));
        callback(null, chunk);
      },
    }),
    { receivedEncodedLength: 0 },
  );
  payload.on('data', (chunk: Buffer) => (output.receivedEncodedLength += chunk.length));
  const stop = (err: Error): void => {
    // Decoding stops; what the client still sends is dropped, so that its connection can carry the answer.
    payload.unpipe(decoder);
    decoder.destroy();
    payload.resume();
    output.destroy(err);
  };
  decoder.on('error', () => stop(new ApiError('invalid_request', `the body is not valid ${coding} data`)));
  output.on('error', () => {
    payload.unpipe(decoder);
    decoder.destroy();
    payload.resume();
  });
  payload.pipe(decoder).pipe(output);
  return output;
}

function tooLarge(limit: number): ApiError {
  return new ApiError('payload_too_large', `the body is larger than ${limit} bytes once decoded`, { limit });
}
