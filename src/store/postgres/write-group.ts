// A PostgreSQL group commit: planned from an unlocked read and appended by statelog_append() in
// one statement, or applied under the meta row's lock when it must be (docs/postgres.md, "Group
// commit per node"); its SQL and parameters. Durability is the store's (durable-head.ts).
import type pg from 'pg';
import type { WriteRequest, WriteResult } from '../log-store.js';
import { storeErrorKind } from '../store-errors.js';
import { conditionsOnOwnOffsets, groupKeys, planWrites, type KeyState, type RememberedAnswer, type StateSource, type WritePlan } from '../write-plan.js';
import { APPEND, APPEND_SQL, BEGIN_AND_LOCK_SQL, GROUP_READ, Params } from './sql.js';
import type { WriteConnections } from './write-connections.js';

/** Tries of a group planned without the lock before it is applied under it (a hot key keeps changing). */
const PLANNED_ATTEMPTS = 3;

/** A group applied: its answers, and the head before and after its records. */
export interface Applied {
  results: WriteResult[];
  base: number;
  head: number;
}

export interface GroupWriterOptions {
  /** Where a planned group reads the state it starts from. */
  reads: pg.Pool;
  writes: WriteConnections;
  /** This node's id, recorded with its appends. */
  node: string;
  idempotencyTtlMs: number;
  /** The compaction horizon a locked group read with the meta row. */
  learnHorizon(horizon: number): void;
}

export class GroupWriter {
  private conflicts = 0;

  constructor(private readonly options: GroupWriterOptions) {}

  /** Planned appends refused because a key they read had changed (each is planned again). */
  get planConflicts(): number {
    return this.conflicts;
  }

  /** Applies a group, not yet durable: planned where it may be, else under the lock. */
  async apply(requests: WriteRequest[], now: number): Promise<Applied> {
    if (!requests.some((request) => request.idempotency) && !conditionsOnOwnOffsets(requests)) {
      // Planned again from a fresh read while other nodes' writes are what changed its keys: the
      // locked path holds the meta row, every node's appends with it, across its round trips.
      for (let attempt = 0; attempt < PLANNED_ATTEMPTS; attempt++) {
        const results = await this.planned(requests, now);
        if (results) return results;
        this.conflicts += 1;
      }
    }
    return this.locked(requests, now);
  }

  private async planned(requests: WriteRequest[], now: number): Promise<Applied | null> {
    const { keys, incrKeys } = groupKeys(requests);
    const read = await readGroup(this.options.reads, keys, incrKeys, []);
    const input = { requests, now, idempotencyTtlMs: this.options.idempotencyTtlMs };
    // Offsets relative to the head at commit, which only the database knows.
    const relative = planWrites({ ...input, head: 0 }, read.source);
    // Only refusals: decided on a committed state read after the requests arrived, shown once durable.
    if (relative.records.length === 0) return { results: relative.results, base: 0, head: maxOffsetRead(read.state) };
    const verify = { keys, state: read.state };
    const connection = await this.options.writes.connect();
    let appended: { base: number }[];
    try {
      appended = (await connection.commits(() => connection.client.query<{ base: number }>(APPEND(appendParams(relative, verify, now, this.options.node))))).rows;
    } finally {
      connection.release();
    }
    if (appended.length === 0) return null;
    const base = appended[0]!.base;
    // The same inputs give the same decisions (no condition meets a record of the group:
    // see conditionsOnOwnOffsets): this only puts the real offsets in the answers.
    const plan = planWrites({ ...input, head: base }, read.source);
    return { results: plan.results, base, head: plan.head };
  }

  private async locked(requests: WriteRequest[], now: number): Promise<Applied> {
    const connection = await this.options.writes.connect();
    const { client } = connection;
    let broken: Error | undefined;
    try {
      const locked = (await client.query(BEGIN_AND_LOCK_SQL)) as unknown as pg.QueryResult<{ head: number; horizon: number }>[];
      const meta = locked[1]!.rows[0]!;
      const { keys, incrKeys, idempotencyKeys } = groupKeys(requests);
      const read = await readGroup(client, keys, incrKeys, idempotencyKeys);
      const plan = planWrites({ requests, head: meta.head, now, idempotencyTtlMs: this.options.idempotencyTtlMs }, read.source);
      const write = writeStatement(plan, now, this.options.node);
      if (write) await client.query(write.text, write.values);
      await connection.commits(() => client.query('COMMIT'));
      this.options.learnHorizon(meta.horizon);
      return { results: plan.results, base: meta.head, head: plan.head };
    } catch (err) {
      // Nothing of the group was committed, unless COMMIT itself went unanswered; a connection that
      // cannot even roll back is dropped.
      if (storeErrorKind(err) !== 'outcome_unknown') await client.query('ROLLBACK').catch((rollbackErr: Error) => (broken = rollbackErr));
      throw err;
    } finally {
      connection.release(broken);
    }
  }
}

/** The highest offset among the state rows read: what a refusal may show. */
function maxOffsetRead(state: ReadonlyMap<string, KeyState>): number {
  let max = 0;
  for (const row of state.values()) if (row.offset > max) max = row.offset;
  return max;
}

interface RowOfGroupRead {
  kind: 's' | 'i';
  key: string;
  seq: number | null;
  live: boolean | null;
  text1: string | null;
  text2: string | null;
  expiresAt: number | null;
}

/** The state rows, live values and remembered answers a group names, in one statement. */
export async function readGroup(
  db: pg.Pool | pg.ClientBase,
  keys: string[],
  incrKeys: string[],
  idempotencyKeys: string[],
): Promise<{ state: Map<string, KeyState>; source: StateSource }> {
  const { rows } = await db.query<RowOfGroupRead>(GROUP_READ([keys, incrKeys, idempotencyKeys]));
  const state = new Map<string, KeyState>();
  const values = new Map<string, string>();
  const answers = new Map<string, RememberedAnswer>();
  for (const row of rows) {
    if (row.kind === 's') {
      state.set(row.key, { offset: row.seq!, live: row.live!, expiresAt: row.expiresAt });
      if (row.text1 !== null) values.set(row.key, row.text1);
    } else {
      answers.set(row.key, { fingerprint: row.text1!, answer: row.text2!, expiresAt: row.expiresAt! });
    }
  }
  const source: StateSource = {
    state: (key) => state.get(key),
    liveValue: (key) => values.get(key)!,
    remembered: (key) => answers.get(key),
  };
  return { state, source };
}

// statelog_append()'s parameters, offsets relative to the plan's base (the function adds the head);
// `verify` is the state read for the plan, checked under the lock (none when already locked).
export function appendParams(plan: WritePlan, verify: { keys: string[]; state: ReadonlyMap<string, KeyState> }, now: number, node: string): unknown[] {
  const records = plan.records;
  const rows = [...plan.state];
  return [
    verify.keys,
    verify.keys.map((key) => verify.state.get(key)?.offset ?? null),
    verify.keys.map((key) => verify.state.get(key)?.live ?? null),
    records.map((r) => r.key),
    records.map((r) => r.op),
    records.map((r) => r.value),
    rows.map(([key]) => key),
    rows.map(([, row]) => row.offset - plan.base),
    rows.map(([, row]) => row.live),
    rows.map(([, row]) => row.expiresAt ?? null),
    plan.newKeys,
    plan.liveDelta,
    plan.superseded,
    now,
    node,
  ];
}

const NOTHING_TO_VERIFY = { keys: [], state: new Map<string, KeyState>() };

/** A plan made under the lock as one statement, with its remembered answers; null when the group wrote nothing. */
export function writeStatement(plan: WritePlan, now: number, node: string): { text: string; values: unknown[] } | null {
  if (plan.records.length === 0 && plan.remember.size === 0) return null;
  const values = plan.records.length > 0 ? appendParams(plan, NOTHING_TO_VERIFY, now, node) : [];
  const p = new Params();
  for (const value of values) p.add(value);
  const parts: string[] = [];
  if (plan.remember.size > 0) {
    const keys = [...plan.remember.keys()];
    const answers = [...plan.remember.values()];
    parts.push(`INSERT INTO idempotency (key, fingerprint, answer, expires_at)
      SELECT * FROM unnest(${p.add(keys, '::text[]')}, ${p.add(answers.map((x) => x.fingerprint), '::text[]')},
        ${p.add(answers.map((x) => x.answer), '::text[]')}, ${p.add(answers.map((x) => x.expiresAt), '::bigint[]')})
      ON CONFLICT (key) DO UPDATE SET fingerprint = excluded.fingerprint, answer = excluded.answer, expires_at = excluded.expires_at`);
  }
  if (plan.records.length === 0) return { text: parts[0]!, values: p.values };
  const text = parts.length > 0 ? `WITH i AS (${parts[0]}) ${APPEND_SQL}` : APPEND_SQL;
  return { text, values: p.values };
}
