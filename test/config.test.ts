import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config.js';

describe('loadConfig', () => {
  it('reads every setting', () => {
    const config = loadConfig({
      PORT: '9000',
      HOST: '0.0.0.0',
      STATELOG_DB: '/data/x.db',
      STATELOG_SYNC: 'normal',
      STATELOG_COMPACT_INTERVAL_MS: '0',
      STATELOG_MIN_DIRTY_RATIO: '0.25',
      STATELOG_MIN_COMPACTION_LAG_MS: '1000',
      STATELOG_MAX_COMPACTION_LAG_MS: '5000',
      STATELOG_TOMBSTONE_RETENTION_MS: '10',
      STATELOG_CONSUMER_HOLD_MAX_RECORDS: '500',
      STATELOG_CONSUMER_HOLD_MAX_MS: '3600000',
      STATELOG_IDEMPOTENCY_TTL_MS: '60000',
      STATELOG_MAX_VALUE_BYTES: '2048',
      STATELOG_MAX_SNAPSHOTS: '2',
      STATELOG_TOKENS: 'read:r1, write:w1,admin:a1',
      LOG_LEVEL: 'debug',
    });
    expect(config).toMatchObject({ port: 9000, host: '0.0.0.0', sync: 'normal', minDirtyRatio: 0.25, maxSnapshots: 2 });
    expect(config).toMatchObject({ consumerHoldMaxRecords: 500, consumerHoldMaxMs: 3_600_000 });
    // Safe by default: a stalled consumer holds at most a million delete markers, for a week.
    expect(loadConfig({})).toMatchObject({ consumerHoldMaxRecords: 1_000_000, consumerHoldMaxMs: 604_800_000 });
    expect([...config.tokens!]).toEqual([
      ['r1', 'read'],
      ['w1', 'write'],
      ['a1', 'admin'],
    ]);
  });

  it.each([
    ['PORT', 'eighty'],
    ['PORT', '1.5'],
    ['STATELOG_SYNC', 'FULL!'],
    ['STATELOG_MIN_DIRTY_RATIO', '-0.1'],
    ['STATELOG_MIN_DIRTY_RATIO', 'half'],
    ['STATELOG_MAX_VALUE_BYTES', '0'],
    ['STATELOG_MAX_SNAPSHOTS', '0'],
    ['STATELOG_TOKENS', 'read'],
    ['STATELOG_TOKENS', 'owner:x'],
    ['STATELOG_TOKENS', 'read:'],
    ['STATELOG_TOKENS', 'read:a,write:a'],
    ['LOG_LEVEL', 'verbose'],
    ['STATELOG_STORE', 'mysql'],
    ['STATELOG_PG_POOL_SIZE', '0'],
    ['STATELOG_PG_QUERY_TIMEOUT_MS', '-1'],
    ['STATELOG_CONSUMER_HOLD_MAX_RECORDS', '0'],
    ['STATELOG_CONSUMER_HOLD_MAX_RECORDS', 'many'],
    ['STATELOG_CONSUMER_HOLD_MAX_MS', '0'],
    ['STATELOG_CONSUMER_HOLD_MAX_MS', '1.5'],
  ])('refuses %s=%s naming the variable', (name, value) => {
    let error: unknown;
    try {
      loadConfig({ [name]: value });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).variable).toBe(name);
    expect((error as Error).message).toContain(name);
  });

  it('never echoes a token in an error', () => {
    expect(() => loadConfig({ STATELOG_TOKENS: 'read:secret-one,bogus:secret-two' })).toThrow(/entry 2/);
    try {
      loadConfig({ STATELOG_TOKENS: 'read:secret-one,bogus:secret-two' });
    } catch (err) {
      expect((err as Error).message).not.toContain('secret');
    }
  });
});

describe('the PostgreSQL store settings', () => {
  const refusal = (env: Record<string, string>): ConfigError => {
    try {
      loadConfig(env);
    } catch (err) {
      if (err instanceof ConfigError) return err;
      throw err;
    }
    throw new Error('the settings were accepted');
  };

  it('reads STATELOG_STORE, DATABASE_URL, the pool size and the query timeout', () => {
    const config = loadConfig({
      STATELOG_STORE: 'postgres',
      DATABASE_URL: 'postgresql://statelog:pw@db.internal:5432/statelog?sslmode=require',
      STATELOG_PG_POOL_SIZE: '20',
      STATELOG_PG_QUERY_TIMEOUT_MS: '5000',
    });
    expect(config).toMatchObject({
      store: 'postgres',
      databaseUrl: 'postgresql://statelog:pw@db.internal:5432/statelog?sslmode=require',
      pgPoolSize: 20,
      pgQueryTimeoutMs: 5000,
    });
    expect(loadConfig({}).pgQueryTimeoutMs).toBe(30_000);
    expect(loadConfig({ STATELOG_STORE: 'postgres', DATABASE_URL: 'postgres://127.0.0.1/x' }).databaseUrl).toBe(
      'postgres://127.0.0.1/x',
    );
  });

  it('needs DATABASE_URL for postgres, and ignores it for sqlite', () => {
    const err = refusal({ STATELOG_STORE: 'postgres' });
    expect(err.variable).toBe('DATABASE_URL');
    expect(err.message).toBe('DATABASE_URL: required when STATELOG_STORE=postgres');
    expect(loadConfig({ DATABASE_URL: 'not even a url' })).toMatchObject({ store: 'sqlite', databaseUrl: null });
  });

  it.each([
    ['not a url at all', 'is not a URL'],
    ['mysql://root:hunter2@127.0.0.1/db', 'got a mysql:// one'],
    ['http://user:hunter2@127.0.0.1/db', 'got a http:// one'],
  ])('refuses DATABASE_URL=%s in one line, without echoing it', (url, detail) => {
    const err = refusal({ STATELOG_STORE: 'postgres', DATABASE_URL: url });
    expect(err.variable).toBe('DATABASE_URL');
    expect(err.message).toContain(detail);
    expect(err.message).not.toContain('hunter2');
    expect(err.message.split('\n')).toHaveLength(1);
  });
});
