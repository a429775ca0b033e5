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
      STATELOG_IDEMPOTENCY_TTL_MS: '60000',
      STATELOG_MAX_VALUE_BYTES: '2048',
      STATELOG_MAX_SNAPSHOTS: '2',
      STATELOG_TOKENS: 'read:r1, write:w1,admin:a1',
      LOG_LEVEL: 'debug',
    });
    expect(config).toMatchObject({ port: 9000, host: '0.0.0.0', sync: 'normal', minDirtyRatio: 0.25, maxSnapshots: 2 });
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
