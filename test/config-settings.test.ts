// Settings: STATELOG_TOKENS, the overload knobs and the transport (TLS, CORS), parsed and refused with one line
// that names the variable (and never echoes a token).
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config.js';
import { makeTestCa, type TestCa } from './support/certificates.js';

function refusal(env: Record<string, string>): ConfigError {
  try {
    loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) return err;
    throw err;
  }
  throw new Error(`accepted ${JSON.stringify(env)}`);
}

describe('STATELOG_TOKENS', () => {
  it('is off (null) when unset or blank', () => {
    expect(loadConfig({}).tokens).toBeNull();
    expect(loadConfig({ STATELOG_TOKENS: '  ' }).tokens).toBeNull();
  });

  it('maps each token to its role, trimming spaces, keeping colons inside tokens', () => {
    const tokens = loadConfig({ STATELOG_TOKENS: 'read:r-1, write : w:2 ,admin:A.3~' }).tokens;
    expect(tokens).toEqual(
      new Map([
        ['r-1', 'read'],
        ['w:2', 'write'],
        ['A.3~', 'admin'],
      ]),
    );
  });

  it.each([
    ['no role', 'sekrit-token', 'entry 1'],
    ['unknown role', 'read:ok-token,owner:sekrit-token', 'entry 2'],
    ['role in capitals', 'READ:sekrit-token', 'entry 1'],
    ['empty token', 'read:', 'entry 1'],
    ['a space inside the token', 'write:sekrit token', 'entry 1'],
    ['a control character', 'write:sekrit\u0007token', 'entry 1'],
    ['non-ASCII token', 'write:sekrit-tøken', 'entry 1'],
    ['trailing comma', 'read:sekrit-token,', 'entry 2'],
    ['the same token twice', 'read:sekrit-token,admin:sekrit-token', 'entry 2'],
  ])('refuses %s, naming the variable and the entry but never the token', (_what, value, entry) => {
    const err = refusal({ STATELOG_TOKENS: value });
    expect(err.variable).toBe('STATELOG_TOKENS');
    expect(err.message).toContain('STATELOG_TOKENS');
    expect(err.message).toContain(entry);
    expect(err.message).not.toContain('sekrit');
    expect(err.message).not.toContain('\n');
  });
});

describe('overload settings', () => {
  it('default to a 1 s mean event-loop delay, sampled every second', () => {
    const config = loadConfig({});
    expect(config.maxEventLoopDelayMs).toBe(1000);
    expect(config.loadSampleIntervalMs).toBe(1000);
  });

  it('accept 0 to turn load shedding off, and other whole numbers in range', () => {
    const config = loadConfig({ STATELOG_MAX_EVENT_LOOP_DELAY_MS: '0', STATELOG_LOAD_SAMPLE_INTERVAL_MS: '50' });
    expect(config.maxEventLoopDelayMs).toBe(0);
    expect(config.loadSampleIntervalMs).toBe(50);
  });

  it.each([
    ['STATELOG_MAX_EVENT_LOOP_DELAY_MS', '-1'],
    ['STATELOG_MAX_EVENT_LOOP_DELAY_MS', '1.5'],
    ['STATELOG_MAX_EVENT_LOOP_DELAY_MS', '600001'],
    ['STATELOG_LOAD_SAMPLE_INTERVAL_MS', '9'],
    ['STATELOG_LOAD_SAMPLE_INTERVAL_MS', 'soon'],
    ['STATELOG_LOAD_SAMPLE_INTERVAL_MS', '60001'],
  ])('refuses %s=%s', (variable, value) => {
    expect(refusal({ [variable]: value }).variable).toBe(variable);
  });
});

describe('the settings for slow readers, snapshot spools and the start-up check', () => {
  it('have their defaults', () => {
    expect(loadConfig({})).toMatchObject({
      stalledReaderMs: 30_000,
      spoolDir: null,
      spoolMaxBytes: 4 * 1024 ** 3,
      startupCheckMaxBytes: 1024 ** 3,
    });
  });

  it('are read from the environment', () => {
    expect(
      loadConfig({
        STATELOG_STALLED_READER_MS: '5000',
        STATELOG_SPOOL_DIR: '/var/spool/statelog',
        STATELOG_SPOOL_MAX_BYTES: '5242880',
        STATELOG_STARTUP_CHECK_MAX_BYTES: '0',
      }),
    ).toMatchObject({ stalledReaderMs: 5000, spoolDir: '/var/spool/statelog', spoolMaxBytes: 5_242_880, startupCheckMaxBytes: 0 });
  });

  it.each([
    ['STATELOG_STALLED_READER_MS', '99'],
    ['STATELOG_STALLED_READER_MS', '3600001'],
    ['STATELOG_STALLED_READER_MS', '30s'],
    ['STATELOG_SPOOL_MAX_BYTES', '1024'],
    ['STATELOG_SPOOL_MAX_BYTES', '-1'],
    ['STATELOG_STARTUP_CHECK_MAX_BYTES', '1GB'],
  ])('refuses %s=%s', (variable, value) => {
    expect(refusal({ [variable]: value }).variable).toBe(variable);
  });
});

describe("the contract's settings", () => {
  it('keep their defaults', () => {
    const config = loadConfig({});
    expect(config).toMatchObject({
      port: 8080,
      host: '127.0.0.1',
      dbPath: './data/statelog.db',
      sync: 'full',
      compactIntervalMs: 60_000,
      minDirtyRatio: 0.5,
      minCompactionLagMs: 0,
      maxCompactionLagMs: 0,
      tombstoneRetentionMs: 86_400_000,
      idempotencyTtlMs: 86_400_000,
      maxValueBytes: 1_048_576,
      maxSnapshots: 8,
      tokens: null,
      logLevel: 'info',
    });
  });
});

describe('the transport settings', () => {
  let ca: TestCa;
  beforeAll(() => {
    ca = makeTestCa();
  });
  afterAll(() => rmSync(ca.dir, { recursive: true, force: true }));

  it('serve plain HTTP without CORS headers when unset', () => {
    expect(loadConfig({})).toMatchObject({ tls: null, corsOrigins: null });
    expect(loadConfig({ STATELOG_TLS_CERT: ' ', STATELOG_CORS_ORIGINS: '' })).toMatchObject({ tls: null, corsOrigins: null });
  });

  it('read the certificate and key files', () => {
    const issued = ca.issue('config');
    const { tls } = loadConfig({ STATELOG_TLS_CERT: issued.certPath, STATELOG_TLS_KEY: issued.keyPath });
    expect(tls).toMatchObject({ certPath: issued.certPath, keyPath: issued.keyPath });
    expect(tls!.cert.toString()).toBe(issued.cert);
  });

  it('refuse one of the two TLS files without the other, unreadable files, files that are not PEM, and a key of another certificate', () => {
    const a = ca.issue('config-a');
    const b = ca.issue('config-b');
    const cases: [Record<string, string>, string, RegExp][] = [
      [{ STATELOG_TLS_CERT: a.certPath }, 'STATELOG_TLS_KEY', /required when STATELOG_TLS_CERT is set/],
      [{ STATELOG_TLS_KEY: a.keyPath }, 'STATELOG_TLS_CERT', /required when STATELOG_TLS_KEY is set/],
      [{ STATELOG_TLS_CERT: join(ca.dir, 'missing.pem'), STATELOG_TLS_KEY: a.keyPath }, 'STATELOG_TLS_CERT', /cannot read ".*missing.pem" \(ENOENT\)/],
      [{ STATELOG_TLS_CERT: a.certPath, STATELOG_TLS_KEY: ca.dir }, 'STATELOG_TLS_KEY', /cannot read .* \(EISDIR\)/],
      [{ STATELOG_TLS_CERT: a.keyPath, STATELOG_TLS_KEY: a.keyPath }, 'STATELOG_TLS_CERT', /holds no PEM certificate/],
      [{ STATELOG_TLS_CERT: a.certPath, STATELOG_TLS_KEY: a.certPath }, 'STATELOG_TLS_KEY', /holds no PEM private key/],
      [{ STATELOG_TLS_CERT: a.certPath, STATELOG_TLS_KEY: b.keyPath }, 'STATELOG_TLS_KEY', /key values mismatch/],
    ];
    for (const [env, variable, message] of cases) {
      const error = refusal(env);
      expect(error.variable, JSON.stringify(env)).toBe(variable);
      expect(error.message).toMatch(message);
      expect(error.message).not.toMatch(/BEGIN/);
    }
  });

  it('read the CORS origins, trimmed, or "*" alone', () => {
    expect(loadConfig({ STATELOG_CORS_ORIGINS: 'https://dash.example.com, http://localhost:3000' }).corsOrigins).toEqual([
      'https://dash.example.com',
      'http://localhost:3000',
    ]);
    expect(loadConfig({ STATELOG_CORS_ORIGINS: '*' }).corsOrigins).toEqual(['*']);
  });

  it('read the trusted proxies (addresses and CIDR ranges), none by default, and refuse anything else', () => {
    expect(loadConfig({}).trustedProxies).toEqual([]);
    expect(loadConfig({ STATELOG_TRUSTED_PROXIES: '127.0.0.1, 10.0.0.0/8,::1,fd00::/8' }).trustedProxies).toEqual(['127.0.0.1', '10.0.0.0/8', '::1', 'fd00::/8']);
    for (const value of ['nginx', '10.0.0.0/33', '10.0.0.1/8/2', '::1/129', '10.0.0.1,', 'loopback']) {
      expect(refusal({ STATELOG_TRUSTED_PROXIES: value }).variable, value).toBe('STATELOG_TRUSTED_PROXIES');
    }
  });

  it('refuse a pattern such as https://*.example.com, which no browser sends, saying so', () => {
    const refused = refusal({ STATELOG_CORS_ORIGINS: 'https://app.example.com, https://*.example.com' });
    expect(refused.variable).toBe('STATELOG_CORS_ORIGINS');
    expect(refused.message).toMatch(/entry 2 \("https:\/\/\*\.example\.com"\) is a pattern: wildcards within an origin are not supported/);
  });

  it.each(['dash.example.com', 'https://dash.example.com/', 'https://dash.example.com/ui', 'ftp://x.example', '*,https://a.example', 'https://a.example,,', 'http://*.localhost:3000'])(
    'refuse STATELOG_CORS_ORIGINS=%s',
    (value) => {
      expect(refusal({ STATELOG_CORS_ORIGINS: value }).variable).toBe('STATELOG_CORS_ORIGINS');
    },
  );
});
