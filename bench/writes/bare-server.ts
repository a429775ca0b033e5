// The baseline for bench/writes/write.ts: a bare fastify route that only parses and validates
// the same PUT body as statelog, and a GET that returns a constant.
import Fastify from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { getKeySchema, putKeySchema } from '../../src/contract/schemas.js';

const app = Fastify({ logger: { level: process.env.LOG_LEVEL ?? 'warn' }, routerOptions: { maxParamLength: 2048 } }).withTypeProvider<TypeBoxTypeProvider>();
app.put('/v1/keys/:key', { schema: putKeySchema }, async (req) => ({ key: req.params.key, offset: 1 }));
app.get('/v1/keys/:key', { schema: getKeySchema }, async (req) => ({ key: req.params.key, value: 1, offset: 1, ts: 0 }));
await app.listen({ port: Number(process.env.PORT ?? 0), host: '127.0.0.1' });
