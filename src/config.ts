// Settings come from the environment, are validated once at start-up, and are then
// passed around as this typed object. Nothing else reads process.env.
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { createSecureContext } from 'node:tls';
import { SPOOL_MIN_BYTES } from './snapshot/spool-budget.js';
import { readTokenFile, ROLES, TokenFileError, type FileEntry, type Role } from './token-file.js';

export type { Role };
export type SyncMode = 'full' | 'normal';
export type StoreKind = 'sqlite' | 'postgres';

export interface Config {
  port: number;
  host: string;
  /** Which database holds the log: the embedded SQLite file, or a shared PostgreSQL. */
  store: StoreKind;
  dbPath: string;
  /** PostgreSQL connection URL; set whenever `store` is postgres, null otherwise. */
  databaseUrl: string | null;
  pgPoolSize: number;
  pgQueryTimeoutMs: number;
  /** A write is answered by then: 503, with `outcome: unknown` if its commit was under way. */
  writeTimeoutMs: number;
  sync: SyncMode;
  compactIntervalMs: number;
  /** Period of the expirer (keys past their TTL get their tombstone); 0 turns it off. */
  expiryIntervalMs: number;
  minDirtyRatio: number;
  minCompactionLagMs: number;
  maxCompactionLagMs: number;
  tombstoneRetentionMs: number;
  /** A consumer's hold on compaction is released past this lag in records... */
  consumerHoldMaxRecords: number;
  /** ... or once its last commit is this old. */
  consumerHoldMaxMs: number;
  idempotencyTtlMs: number;
  maxValueBytes: number;
  maxSnapshots: number;
  /** A snapshot or stream whose reader takes nothing for this long is cut, freeing what it holds. */
  stalledReaderMs: number;
  /** Where snapshots are spooled; null: beside the SQLite file, or the system's temporary folder. */
  spoolDir: string | null;
  spoolMaxBytes: number;
  /** Seconds a finished snapshot serves requests that accept its offset (`minOffset`), and their max-age. */
  snapshotMaxAgeSeconds: number;
  startupCheckMaxBytes: number;
  maxWatchers: number;
  /** Memory the pages kept at the head for sharing among long polls and streams may hold. */
  sharedPagesMaxBytes: number;
  /** token → role (STATELOG_TOKENS); null when not set. */
  tokens: Map<string, Role> | null;
  tokensFile: { path: string; entries: FileEntry[] } | null;
  logLevel: string;
  maxEventLoopDelayMs: number;
  loadSampleIntervalMs: number;
  /** HTTPS: the PEM certificate chain and private key, as read at start-up; null serves HTTP. */
  tls: TlsFiles | null;
  /** Origins allowed to call from a browser (CORS); ['*'] for any; null sends no CORS headers. */
  corsOrigins: string[] | null;
  /** Addresses and CIDR ranges of proxies whose X-Forwarded-For names the client; empty: none trusted. */
  trustedProxies: string[];
}

export interface TlsFiles {
  certPath: string;
  keyPath: string;
  cert: Buffer;
  key: Buffer;
  /** STATELOG_TLS_CLIENT_CA: clients must present a certificate it signed; null: none asked for. */
  clientCaPath: string | null;
  clientCa: Buffer | null;
}

export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    detail: string,
  ) {
    super(`${variable}: ${detail}`);
    this.name = 'ConfigError';
  }
}

type Env = Record<string, string | undefined>;

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

function raw(env: Env, name: string): string | undefined {
  const value = env[name];
  return value === undefined || value.trim() === '' ? undefined : value.trim();
}

function integer(env: Env, name: string, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const text = raw(env, name);
  if (text === undefined) return fallback;
  if (!/^\d+$/.test(text)) throw new ConfigError(name, `expected a whole number, got "${text}"`);
  const value = Number(text);
  if (value < min || value > max) throw new ConfigError(name, `expected ${min} to ${max}, got ${text}`);
  return value;
}

function ratio(env: Env, name: string, fallback: number): number {
  const text = raw(env, name);
  if (text === undefined) return fallback;
  const value = Number(text);
  if (!/^\d*\.?\d+$/.test(text) || value > 1) {
    throw new ConfigError(name, `expected a number from 0 to 1, got "${text}"`);
  }
  return value;
}

function oneOf<T extends string>(env: Env, name: string, allowed: readonly T[], fallback: T): T {
  const text = raw(env, name);
  if (text === undefined) return fallback;
  if (!(allowed as readonly string[]).includes(text)) {
    throw new ConfigError(name, `expected one of ${allowed.join(', ')}, got "${text}"`);
  }
  return text as T;
}

function parseTokens(env: Env): Map<string, Role> | null {
  const text = raw(env, 'STATELOG_TOKENS');
  if (text === undefined) return null;
  const tokens = new Map<string, Role>();
  for (const [index, pair] of text.split(',').entries()) {
    const separator = pair.indexOf(':');
    const role = pair.slice(0, separator).trim() as Role;
    const token = pair.slice(separator + 1).trim();
    // The message names the position, never the token itself.
    if (separator < 0 || !ROLES.includes(role) || !/^[\x21-\x7e]+$/.test(token)) {
      throw new ConfigError('STATELOG_TOKENS', `entry ${index + 1} is not "read|write|admin:<token>"`);
    }
    if (tokens.has(token)) throw new ConfigError('STATELOG_TOKENS', `entry ${index + 1} repeats a token`);
    tokens.set(token, role);
  }
  return tokens;
}

function tokensFile(env: Env): Config['tokensFile'] {
  const path = raw(env, 'STATELOG_TOKENS_FILE');
  if (path === undefined) return null;
  try {
    return { path, entries: readTokenFile(path) };
  } catch (err) {
    if (err instanceof TokenFileError) throw new ConfigError('STATELOG_TOKENS_FILE', err.message);
    throw err;
  }
}

/** DATABASE_URL, required for PostgreSQL; never echoed, as it may hold a password. */
function databaseUrl(env: Env, store: StoreKind): string | null {
  const text = raw(env, 'DATABASE_URL');
  if (store !== 'postgres') return null;
  if (text === undefined) throw new ConfigError('DATABASE_URL', 'required when STATELOG_STORE=postgres');
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new ConfigError('DATABASE_URL', 'is not a URL; expected postgres://user:password@host:5432/database');
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
    throw new ConfigError('DATABASE_URL', `expected a postgres:// or postgresql:// URL, got a ${url.protocol}// one`);
  }
  return text;
}

function readPem(variable: string, path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'error';
    throw new ConfigError(variable, `cannot read "${path}" (${code})`);
  }
}

/** A certificate and its key, checked at start-up and on SIGHUP: a bad pair is refused with one line, never served. */
export function readTlsFiles(certPath: string, keyPath: string, clientCaPath: string | null = null): TlsFiles {
  const cert = readPem('STATELOG_TLS_CERT', certPath);
  const key = readPem('STATELOG_TLS_KEY', keyPath);
  const clientCa = clientCaPath === null ? null : readPem('STATELOG_TLS_CLIENT_CA', clientCaPath);
  if (!cert.includes('-----BEGIN CERTIFICATE-----')) {
    throw new ConfigError('STATELOG_TLS_CERT', `"${certPath}" holds no PEM certificate`);
  }
  if (clientCa && !clientCa.includes('-----BEGIN CERTIFICATE-----')) {
    throw new ConfigError('STATELOG_TLS_CLIENT_CA', `"${clientCaPath}" holds no PEM certificate`);
  }
  if (!/-----BEGIN [A-Z ]*PRIVATE KEY-----/.test(key.toString('latin1'))) {
    throw new ConfigError('STATELOG_TLS_KEY', `"${keyPath}" holds no PEM private key`);
  }
  try {
    createSecureContext({ cert, key });
  } catch (err) {
    // OpenSSL's reason, such as "key values mismatch"; never the key itself.
    throw new ConfigError('STATELOG_TLS_KEY', `cannot be used with STATELOG_TLS_CERT: ${(err as Error).message}`);
  }
  if (clientCa) {
    try {
      createSecureContext({ ca: clientCa });
    } catch (err) {
      throw new ConfigError('STATELOG_TLS_CLIENT_CA', `"${clientCaPath}" cannot be used: ${(err as Error).message}`);
    }
  }
  return { certPath, keyPath, cert, key, clientCaPath, clientCa };
}

/** Why clients would refuse a certificate now (expired, not yet valid), or null; it is served all the same. */
export function certificateProblem(cert: Buffer, now = new Date()): { problem: string; validFrom: string; validTo: string } | null {
  const x509 = new X509Certificate(cert);
  const validFrom = new Date(x509.validFrom);
  const validTo = new Date(x509.validTo);
  const dates = { validFrom: validFrom.toISOString(), validTo: validTo.toISOString() };
  if (now > validTo) return { problem: 'the TLS certificate has expired: clients will refuse it', ...dates };
  if (now < validFrom) return { problem: 'the TLS certificate is not valid yet: clients will refuse it', ...dates };
  return null;
}

function tlsFiles(env: Env): TlsFiles | null {
  const certPath = raw(env, 'STATELOG_TLS_CERT');
  const keyPath = raw(env, 'STATELOG_TLS_KEY');
  const clientCaPath = raw(env, 'STATELOG_TLS_CLIENT_CA') ?? null;
  if (clientCaPath !== null) {
    if (certPath === undefined || keyPath === undefined) throw new ConfigError('STATELOG_TLS_CLIENT_CA', 'needs STATELOG_TLS_CERT and STATELOG_TLS_KEY (client certificates are a TLS feature)');
    // A certificate's CN names the file entry whose role and prefixes apply.
    if (raw(env, 'STATELOG_TOKENS_FILE') === undefined) throw new ConfigError('STATELOG_TLS_CLIENT_CA', 'needs STATELOG_TOKENS_FILE, whose entries the certificates\' CNs name');
  }
  if (certPath === undefined && keyPath === undefined) return null;
  if (certPath === undefined) throw new ConfigError('STATELOG_TLS_CERT', 'required when STATELOG_TLS_KEY is set (give both or neither)');
  if (keyPath === undefined) throw new ConfigError('STATELOG_TLS_KEY', 'required when STATELOG_TLS_CERT is set (give both or neither)');
  return readTlsFiles(certPath, keyPath, clientCaPath);
}

/** Origins as a browser sends them: scheme://host[:port], no path; or a lone "*". */
function corsOrigins(env: Env): string[] | null {
  const text = raw(env, 'STATELOG_CORS_ORIGINS');
  if (text === undefined) return null;
  const origins = text.split(',').map((origin) => origin.trim());
  if (origins.includes('*')) {
    if (origins.length > 1) throw new ConfigError('STATELOG_CORS_ORIGINS', '"*" allows any origin; list no others with it');
    return ['*'];
  }
  // A browser sends an origin, never a pattern: "https://*.example.com" would match nothing.
  const pattern = origins.findIndex((origin) => origin.includes('*'));
  if (pattern >= 0) {
    throw new ConfigError(
      'STATELOG_CORS_ORIGINS',
      `entry ${pattern + 1} ("${origins[pattern]}") is a pattern: wildcards within an origin are not supported; list each origin, or give "*" alone for any`,
    );
  }
  for (const [index, origin] of origins.entries()) {
    let parsed: URL | undefined;
    try {
      parsed = new URL(origin);
    } catch {
      parsed = undefined;
    }
    if (!parsed || !['http:', 'https:'].includes(parsed.protocol) || parsed.origin !== origin) {
      throw new ConfigError(
        'STATELOG_CORS_ORIGINS',
        `entry ${index + 1} ("${origin}") is not an origin such as https://dashboard.example.com or http://localhost:3000`,
      );
    }
  }
  return origins;
}

/** Room for a snapshot to start (its first 4 MiB and a write in flight): a smaller budget could serve none larger. */
function spoolMaxBytes(env: Env): number {
  const text = raw(env, 'STATELOG_SPOOL_MAX_BYTES');
  if (text !== undefined && /^\d+$/.test(text) && Number(text) < SPOOL_MIN_BYTES) {
    throw new ConfigError(
      'STATELOG_SPOOL_MAX_BYTES',
      `expected at least ${SPOOL_MIN_BYTES} (5 MiB), got ${text}: a snapshot's answer starts once its first 4 MiB are spooled, and each snapshot is spooled whole, so set it above the size of the largest state to serve`,
    );
  }
  return integer(env, 'STATELOG_SPOOL_MAX_BYTES', 4 * 1024 ** 3, SPOOL_MIN_BYTES);
}

/** Addresses (192.0.2.1, ::1) or CIDR ranges (10.0.0.0/8); a header from anyone else names no client. */
function trustedProxies(env: Env): string[] {
  const text = raw(env, 'STATELOG_TRUSTED_PROXIES');
  if (text === undefined) return [];
  return text.split(',').map((entry, index) => {
    const proxy = entry.trim();
    const [address = '', bits, ...rest] = proxy.split('/');
    const family = isIP(address);
    const width = family === 6 ? 128 : 32;
    const range = bits === undefined || (/^\d{1,3}$/.test(bits) && Number(bits) <= width);
    if (family === 0 || !range || rest.length > 0) {
      throw new ConfigError('STATELOG_TRUSTED_PROXIES', `entry ${index + 1} ("${proxy}") is not an address or CIDR range such as 10.0.0.5 or 10.0.0.0/8`);
    }
    return proxy;
  });
}

export function loadConfig(env: Env = process.env): Config {
  const store = oneOf(env, 'STATELOG_STORE', ['sqlite', 'postgres'], 'sqlite');
  return {
    port: integer(env, 'PORT', 8080, 0, 65535),
    host: raw(env, 'HOST') ?? '127.0.0.1',
    store,
    dbPath: raw(env, 'STATELOG_DB') ?? './data/statelog.db',
    databaseUrl: databaseUrl(env, store),
    pgPoolSize: integer(env, 'STATELOG_PG_POOL_SIZE', 10, 1, 1000),
    pgQueryTimeoutMs: integer(env, 'STATELOG_PG_QUERY_TIMEOUT_MS', 30_000, 0),
    writeTimeoutMs: integer(env, 'STATELOG_WRITE_TIMEOUT_MS', 10_000, 100, 3_600_000),
    sync: oneOf(env, 'STATELOG_SYNC', ['full', 'normal'], 'full'),
    compactIntervalMs: integer(env, 'STATELOG_COMPACT_INTERVAL_MS', 60_000, 0),
    expiryIntervalMs: integer(env, 'STATELOG_EXPIRY_INTERVAL_MS', 250, 0, 3_600_000),
    minDirtyRatio: ratio(env, 'STATELOG_MIN_DIRTY_RATIO', 0.5),
    minCompactionLagMs: integer(env, 'STATELOG_MIN_COMPACTION_LAG_MS', 0, 0),
    maxCompactionLagMs: integer(env, 'STATELOG_MAX_COMPACTION_LAG_MS', 0, 0),
    tombstoneRetentionMs: integer(env, 'STATELOG_TOMBSTONE_RETENTION_MS', 86_400_000, 0),
    // Bounds on what a stalled consumer can keep: at most this many delete markers above it, this long.
    consumerHoldMaxRecords: integer(env, 'STATELOG_CONSUMER_HOLD_MAX_RECORDS', 1_000_000, 1),
    consumerHoldMaxMs: integer(env, 'STATELOG_CONSUMER_HOLD_MAX_MS', 7 * 86_400_000, 1),
    idempotencyTtlMs: integer(env, 'STATELOG_IDEMPOTENCY_TTL_MS', 86_400_000, 1),
    maxValueBytes: integer(env, 'STATELOG_MAX_VALUE_BYTES', 1_048_576, 1, 256 * 1024 * 1024),
    maxSnapshots: integer(env, 'STATELOG_MAX_SNAPSHOTS', 8, 1, 10_000),
    stalledReaderMs: integer(env, 'STATELOG_STALLED_READER_MS', 30_000, 100, 3_600_000),
    spoolDir: raw(env, 'STATELOG_SPOOL_DIR') ?? null,
    spoolMaxBytes: spoolMaxBytes(env),
    snapshotMaxAgeSeconds: integer(env, 'STATELOG_SNAPSHOT_MAX_AGE_SECONDS', 10, 0, 3600),
    startupCheckMaxBytes: integer(env, 'STATELOG_STARTUP_CHECK_MAX_BYTES', 1024 ** 3, 0),
    maxWatchers: integer(env, 'STATELOG_MAX_WATCHERS', 10_000, 1, 1_000_000),
    sharedPagesMaxBytes: integer(env, 'STATELOG_SHARED_PAGES_MAX_BYTES', 64 * 1024 * 1024, 0, 64 * 1024 ** 3),
    tokens: parseTokens(env),
    tokensFile: tokensFile(env),
    logLevel: oneOf(env, 'LOG_LEVEL', LOG_LEVELS, 'info'),
    // Operators' knobs for shedding load (README, Settings; docs/design.md, Overload).
    maxEventLoopDelayMs: integer(env, 'STATELOG_MAX_EVENT_LOOP_DELAY_MS', 1000, 0, 600_000),
    loadSampleIntervalMs: integer(env, 'STATELOG_LOAD_SAMPLE_INTERVAL_MS', 1000, 10, 60_000),
    tls: tlsFiles(env),
    corsOrigins: corsOrigins(env),
    trustedProxies: trustedProxies(env),
  };
}
