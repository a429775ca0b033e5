// Answers sent as JSON text: values are stored as JSON text, so reads and writes alike
// assemble their bodies instead of serialising objects.
import type { FastifyReply } from 'fastify';
import type { Answer } from '../contract/model.js';

export function sendAnswer(reply: FastifyReply, answer: Answer): FastifyReply {
  return sendJsonText(reply.code(answer.status).headers(answer.headers), answer.body);
}

/** Sends JSON text as it is (fastify sends a string with a JSON type unserialised). */
export function sendJsonText(reply: FastifyReply, text: string): FastifyReply {
  return reply.type('application/json; charset=utf-8').send(text);
}
