// Every request and response schema; openapi.yaml describes the same shapes (test/openapi.test.ts).
import Type from 'typebox';

export const MAX_BATCH_ITEMS = 1000;
export const MAX_LIST_LIMIT = 1000;
export const MAX_HISTORY_LIMIT = 1000;
export const MAX_CHANGES_LIMIT = 10_000;
export const DEFAULT_CHANGES_LIMIT = 1000;
export const MAX_WAIT_SECONDS = 60;

const Offset = Type.Integer({ minimum: 0 });
const JsonValue = Type.Unknown({ description: 'any JSON value' });

export const ErrorBody = Type.Object({
  error: Type.Object(
    { code: Type.String(), message: Type.String() },
    { additionalProperties: true },
  ),
});

const errors = (...statuses: number[]) => Object.fromEntries(statuses.map((status) => [status, ErrorBody]));

export const KeyParams = Type.Object({ key: Type.String() });

/** When a value expires (ms since the epoch), on every entry and record of a value that has one. */
const ExpiresAt = Type.Optional(Type.Integer({ description: 'ms since the epoch; from then on the key counts as absent' }));
/** A live key, as GET, listings and snapshot lines give it: with `expiresAt` when the value has a time to live. */
export const Entry = Type.Object({ key: Type.String(), value: JsonValue, offset: Offset, ts: Type.Integer(), expiresAt: ExpiresAt });
export const Written = Type.Object({ key: Type.String(), offset: Offset });

// --- keys ---

/** The largest time to live, in ms: one year (the same as src/store/write-plan.ts's MAX_TTL_MS). */
export const MAX_TTL_MS = 365 * 24 * 3600 * 1000;
const TtlMs = Type.Integer({ minimum: 1, maximum: MAX_TTL_MS, description: 'time to live in ms' });

export const PutKeyBody = Type.Object({ value: JsonValue, ttlMs: Type.Optional(TtlMs) }, { additionalProperties: false });

export const ListQuery = Type.Object(
  {
    prefix: Type.String({ default: '' }),
    limit: Type.Integer({ minimum: 1, maximum: MAX_LIST_LIMIT, default: 100 }),
    cursor: Type.Optional(Type.String({ maxLength: 2048 })),
  },
  { additionalProperties: false },
);

export const putKeySchema = {
  params: KeyParams,
  body: PutKeyBody,
  response: { 200: Written, ...errors(400, 401, 403, 412, 413, 415, 422, 503) },
};

export const getKeySchema = {
  params: KeyParams,
  response: { 200: Entry, 304: Type.Unknown({ description: 'no body' }), ...errors(400, 401, 403, 404, 503) },
};

export const deleteKeySchema = {
  params: KeyParams,
  response: { 200: Written, ...errors(400, 401, 403, 404, 412, 422, 503) },
};

export const listKeysSchema = {
  querystring: ListQuery,
  response: {
    200: Type.Object({
      items: Type.Array(Entry),
      cursor: Type.Union([Type.String(), Type.Null()]),
      offset: Offset,
    }),
    ...errors(400, 401, 403, 503),
  },
};

export const HistoryQuery = Type.Object(
  {
    limit: Type.Integer({ minimum: 1, maximum: MAX_HISTORY_LIMIT, default: 100 }),
    before: Type.Optional(Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER })),
  },
  { additionalProperties: false },
);

// --- batches ---

/** One batch item; the kinds are told apart in the handler, which words a clearer error than a oneOf. */
export const BatchItem = Type.Object(
  {
    key: Type.String(),
    op: Type.Optional(Type.Union([Type.Literal('set'), Type.Literal('delete'), Type.Literal('incr')])),
    value: Type.Optional(JsonValue),
    by: Type.Optional(Type.Number()),
    // Bounds of an incr's result, inclusive.
    min: Type.Optional(Type.Number()),
    max: Type.Optional(Type.Number()),
    ttlMs: Type.Optional(TtlMs),
    ifOffset: Type.Optional(Offset),
    ifAbsent: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);

export const BatchBody = Type.Object(
  { records: Type.Array(BatchItem, { minItems: 1, maxItems: MAX_BATCH_ITEMS }) },
  { additionalProperties: false },
);

export const postRecordsSchema = {
  body: BatchBody,
  response: {
    200: Type.Object({
      records: Type.Array(
        Type.Object({ key: Type.String(), offset: Offset, value: Type.Optional(Type.Number()) }),
      ),
      offset: Offset,
    }),
    ...errors(400, 401, 403, 404, 409, 412, 413, 415, 422, 503),
  },
};

// --- snapshot and changes ---

const Prefix = Type.String({ default: '', description: 'only keys that start with this (UTF-8, byte-wise)' });
const WatchedKey = Type.Optional(Type.String({ description: 'only this exact key; not with prefix' }));
const after = (options: { default?: number } = {}) => Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER, ...options });
const Epoch = Type.String({ minLength: 1, maxLength: 128 });
/** The generation a reader was served under, as the server's Link names it (contract/lineage.ts). */
const Generation = Type.String({ pattern: '^[1-9][0-9]{0,8}-[0-9a-f]{1,32}$' });

export const LogRecord = Type.Object({
  offset: Offset,
  key: Type.String(),
  op: Type.Union([Type.Literal('set'), Type.Literal('delete')]),
  value: Type.Optional(JsonValue),
  ts: Type.Integer(),
  expiresAt: ExpiresAt,
});

export const keyHistorySchema = {
  params: KeyParams,
  querystring: HistoryQuery,
  response: {
    200: Type.Object({
      records: Type.Array(LogRecord),
      next: Type.Union([Offset, Type.Null()]),
      head: Offset,
      epoch: Type.String(),
    }),
    ...errors(400, 401, 403, 503),
  },
};

/** A stream's body is not serialised by fastify; these describe it for readers of the schema. */
const NdjsonBody = Type.Unknown({ description: 'application/x-ndjson: one entry per line, then {"end": true, ...}' });
const EventStreamBody = Type.Unknown({ description: 'text/event-stream' });

export const snapshotSchema = {
  querystring: Type.Object(
    {
      prefix: Prefix,
      // Any state at this offset or later will do: a shared or cached one may answer.
      minOffset: Type.Optional(after()),
      // A reader told of a new epoch asks for a state of that one, which no cache holds yet.
      epoch: Type.Optional(Epoch),
    },
    { additionalProperties: false },
  ),
  response: { 200: NdjsonBody, 304: Type.Null(), ...errors(400, 401, 403, 410, 429, 503) },
};

export const changesSchema = {
  querystring: Type.Object(
    {
      after: after({ default: 0 }),
      prefix: Prefix,
      key: WatchedKey,
      limit: Type.Integer({ minimum: 1, maximum: MAX_CHANGES_LIMIT, default: DEFAULT_CHANGES_LIMIT }),
      wait: Type.Number({ minimum: 0, maximum: MAX_WAIT_SECONDS, default: 0 }),
      epoch: Type.Optional(Epoch),
      // Set by the server in its Link: a reader whose records a failover lost is told so.
      gen: Type.Optional(Generation),
      // Set by the server in the Link it sends after a long poll ended at the head.
      cursor: Type.Optional(after()),
    },
    { additionalProperties: false },
  ),
  response: {
    200: Type.Object({ records: Type.Array(LogRecord), next: Offset, head: Offset, epoch: Type.String() }),
    ...errors(400, 401, 403, 410, 429, 503),
  },
};

export const changeStreamSchema = {
  querystring: Type.Object(
    {
      after: Type.Optional(after()),
      prefix: Prefix,
      key: WatchedKey,
      snapshot: Type.Boolean({ default: false }),
      epoch: Type.Optional(Epoch),
      gen: Type.Optional(Generation),
    },
    // An EventSource polyfill's cache-buster must not close the stream for good.
    { additionalProperties: true },
  ),
  response: { 200: EventStreamBody, ...errors(400, 401, 403, 429, 503) },
};

// --- consumers ---

export const ConsumerParams = Type.Object({ name: Type.String() });

export const Consumer = Type.Object(
  {
    name: Type.String(),
    /** The scoped token entry that made it; in listings for unscoped tokens only. */
    owner: Type.Optional(Type.String()),
    offset: Offset,
    epoch: Type.String(),
    committedAt: Type.Integer(),
    lag: Type.Integer({ minimum: 0 }),
    hold: Type.Boolean(),
    holdReleasedAt: Type.Optional(Type.Integer()),
  },
  { additionalProperties: false },
);

export const PutConsumerBody = Type.Object(
  {
    offset: Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER }),
    epoch: Type.Optional(Epoch),
    rewind: Type.Optional(Type.Boolean()),
    hold: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);

export const putConsumerSchema = {
  params: ConsumerParams,
  body: PutConsumerBody,
  response: { 200: Consumer, ...errors(400, 401, 403, 409, 410, 412, 413, 415, 503) },
};

export const getConsumerSchema = {
  params: ConsumerParams,
  response: { 200: Consumer, ...errors(400, 401, 404, 503) },
};

export const deleteConsumerSchema = {
  params: ConsumerParams,
  response: { 204: Type.Null({ description: 'no body' }), ...errors(400, 401, 403, 404, 412, 503) },
};

export const listConsumersSchema = {
  response: {
    200: Type.Object({ consumers: Type.Array(Consumer), head: Offset, epoch: Type.String() }, { additionalProperties: false }),
    ...errors(401, 503),
  },
};

// --- stats and operations ---

export const LastCompaction = Type.Object(
  {
    trigger: Type.Union([Type.Literal('dirty_ratio'), Type.Literal('max_lag'), Type.Literal('admin')]),
    startedAt: Type.Integer(),
    durationMs: Type.Number(),
    removed: Type.Integer(),
    tombstonesRemoved: Type.Integer(),
    horizon: Offset,
    head: Offset,
    bytesBefore: Type.Integer(),
    bytesAfter: Type.Integer(),
  },
  { additionalProperties: false },
);

export const compactSchema = {
  response: {
    200: Type.Object({
      removed: Type.Integer(),
      tombstonesRemoved: Type.Integer(),
      durationMs: Type.Number(),
      horizon: Offset,
      head: Offset,
    }),
    // It takes no body; one that is sent must be JSON, and is ignored.
    ...errors(400, 401, 403, 413, 415, 503),
  },
};

export const statsSchema = {
  response: {
    200: Type.Object({
      head: Offset,
      records: Type.Integer(),
      liveKeys: Type.Integer(),
      expiredKeys: Type.Integer(),
      tombstones: Type.Integer(),
      dirtyRatio: Type.Number(),
      horizon: Offset,
      dbBytes: Type.Integer(),
      digest: Type.String({ pattern: '^[0-9a-f]{16}$' }),
      digestOffset: Offset,
      lastCompaction: Type.Union([LastCompaction, Type.Null()]),
      maxValueBytes: Type.Integer(),
      maxBatchBytes: Type.Integer(),
    }),
    ...errors(401, 403, 503),
  },
};

export const healthSchema = {
  response: { 200: Type.Object({ status: Type.String() }), 503: ErrorBody },
};

/** Prometheus text exposition; only the error answers are JSON. */
export const metricsSchema = {
  response: { 200: Type.String(), ...errors(401, 403, 503) },
};

export type Static<T extends Type.TSchema> = Type.Static<T>;
