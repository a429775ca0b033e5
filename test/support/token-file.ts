// Token files written by the test: each entry's secret is known to the test, the file
// holds only its SHA-256, as a real one does.
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Role } from '../../src/config.js';

export interface TestToken {
  name: string;
  secret: string;
  role: Role;
  prefixes?: string[];
}

export const sha256Hex = (secret: string): string => createHash('sha256').update(secret, 'utf8').digest('hex');

/** The file's entries (what STATELOG_TOKENS_FILE holds) for these tokens. */
export function fileEntries(tokens: readonly TestToken[]) {
  return tokens.map(({ name, secret, role, prefixes }) => ({ name, sha256: sha256Hex(secret), role, ...(prefixes ? { prefixes } : {}) }));
}

/** Writes the token file into `dir` (as `file`) and returns its path. */
export function writeTokenFile(dir: string, tokens: readonly TestToken[], file = 'tokens.json'): string {
  const path = join(dir, file);
  writeFileSync(path, JSON.stringify(fileEntries(tokens), null, 2));
  return path;
}
