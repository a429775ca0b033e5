// The token file (STATELOG_TOKENS_FILE): named entries of a secret's SHA-256, a role and optional key
// prefixes; no secret. Checked at start-up and on SIGHUP, refused whole on any fault.
import { readFileSync } from 'node:fs';
import { normalizePrefixes } from './contract/key-scope.js';
import { MAX_KEY_BYTES } from './contract/key-rules.js';

export type Role = 'read' | 'write' | 'admin';
export const ROLES: readonly Role[] = ['read', 'write', 'admin'];

export interface TokenEntry {
  /** Named in the access log and in metrics; idempotency keys are remembered per name. */
  name: string;
  role: Role;
  /** The key prefixes it may touch, normalised (contract/key-scope.ts); null: every key. */
  prefixes: readonly string[] | null;
}

export interface FileEntry extends TokenEntry {
  sha256: string;
}

export class TokenFileError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TokenFileError';
  }
}

/** Names fit a CN, a metric label and a log field; no space, so that "<name> <idempotency key>" never collides. */
const NAME = /^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$/;
const SHA256 = /^[0-9a-fA-F]{64}$/;
const MEMBERS = new Set(['name', 'sha256', 'role', 'prefixes']);
const CONTROL = /[\u0000-\u001f\u007f]/;

function prefixProblem(prefix: unknown): string | null {
  if (typeof prefix !== 'string' || prefix === '') return 'is not a non-empty string (leave "prefixes" out for every key)';
  if (!prefix.isWellFormed() || CONTROL.test(prefix)) return 'holds a control character or a lone surrogate';
  if (Buffer.byteLength(prefix, 'utf8') > MAX_KEY_BYTES) return `is longer than ${MAX_KEY_BYTES} bytes`;
  return null;
}

function checkEntry(raw: unknown, index: number): FileEntry {
  const at = `entry ${index + 1}`;
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new TokenFileError(`${at} is not an object`);
  const entry = raw as Record<string, unknown>;
  const name = entry.name;
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw new TokenFileError(`${at}: "name" must be 1 to 128 of A-Z a-z 0-9 . _ : @ - (starting with a letter or digit)`);
  }
  const named = `${at} ("${name}")`;
  const extra = Object.keys(entry).find((member) => !MEMBERS.has(member));
  if (extra !== undefined) throw new TokenFileError(`${named}: unknown member "${extra}" (expected name, sha256, role, prefixes)`);
  if (typeof entry.sha256 !== 'string' || !SHA256.test(entry.sha256)) {
    throw new TokenFileError(`${named}: "sha256" must be the 64 hex digits of the secret's SHA-256 (statelog token new makes one)`);
  }
  if (!ROLES.includes(entry.role as Role)) throw new TokenFileError(`${named}: "role" must be "read", "write" or "admin"`);
  let prefixes: string[] | null = null;
  if (entry.prefixes !== undefined) {
    if (!Array.isArray(entry.prefixes) || entry.prefixes.length === 0) {
      throw new TokenFileError(`${named}: "prefixes" must be a non-empty array of key prefixes (leave it out for every key)`);
    }
    for (const [i, prefix] of entry.prefixes.entries()) {
      const problem = prefixProblem(prefix);
      if (problem) throw new TokenFileError(`${named}: prefixes[${i}] ${problem}`);
    }
    prefixes = normalizePrefixes(entry.prefixes as string[]);
  }
  return { name, sha256: entry.sha256.toLowerCase(), role: entry.role as Role, prefixes };
}

/** The entries of a token file's text, or a TokenFileError naming the first fault. */
export function parseTokenFile(text: string): FileEntry[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new TokenFileError(`is not JSON (${(err as Error).message})`);
  }
  if (!Array.isArray(parsed)) throw new TokenFileError('must hold a JSON array of entries');
  const entries = parsed.map(checkEntry);
  const names = new Set<string>();
  const digests = new Set<string>();
  for (const [index, entry] of entries.entries()) {
    if (names.has(entry.name)) throw new TokenFileError(`entry ${index + 1} ("${entry.name}") repeats a name`);
    if (digests.has(entry.sha256)) throw new TokenFileError(`entry ${index + 1} ("${entry.name}") repeats another entry's sha256`);
    names.add(entry.name);
    digests.add(entry.sha256);
  }
  return entries;
}

export function readTokenFile(path: string): FileEntry[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new TokenFileError(`cannot read "${path}" (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  try {
    return parseTokenFile(text);
  } catch (err) {
    throw new TokenFileError(`"${path}" ${(err as Error).message}`);
  }
}
