// A PostgreSQL write group's SQL: the read its plan starts from, and statelog_append()'s parameters.
import type pg from 'pg';
import type { KeyState, RememberedAnswer, StateSource, WritePlan } from '../write-plan.js';
import { APPEND_SQL, GROUP_READ, Params } from './sql.js';

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
