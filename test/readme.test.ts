// The README as a user meets it: every shell block runs as written, twice in a row,
// against a real server process (its curl examples with the server's port in place of
// 8080, its `statelog` commands through the command-line client), and each succeeds
// with no error body in its output. Blocks that cannot run in a test (installing,
// starting a server, Docker) are marked just above the fence with
// `<!-- readme-test: skip (reason) -->` and skipped by name. The README's links to files
// must lead to files in the repository, and it stays a manual, not a lab notebook.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync, chmodSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI_ENTRY } from '../harness/build.js';
import { startServer, type ListeningServer } from './support/child-server.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const README = readFileSync(join(ROOT, 'README.md'), 'utf8');

interface Block {
  line: number;
  code: string;
  /** The reason given by the skip marker, or null for a block that runs. */
  skip: string | null;
}

function shellBlocks(markdown: string): Block[] {
  const lines = markdown.split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (lines[i] !== '```sh') continue;
    const end = lines.indexOf('```', i + 1);
    const marker = /^<!-- readme-test: skip \((.+)\) -->$/.exec(lines[i - 1] ?? '');
    blocks.push({ line: i + 1, code: lines.slice(i + 1, end).join('\n'), skip: marker?.[1] ?? null });
    i = end;
  }
  return blocks;
}

const blocks = shellBlocks(README);

function runBlock(code: string, env: Record<string, string>, cwd: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const proc = spawn('bash', ['-eo', 'pipefail', '-c', code], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    proc.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    proc.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    proc.once('error', reject);
    proc.once('exit', (exitCode) => resolve({ code: exitCode, output }));
  });
}

describe('the README', () => {
  it('marks the blocks it cannot run, with a reason, and runs the rest', () => {
    const skipped = blocks.filter((block) => block.skip !== null);
    expect(skipped.length).toBeGreaterThan(0);
    expect(blocks.length - skipped.length).toBeGreaterThanOrEqual(5);
    // What only a person can run is marked, never left to fail.
    for (const block of blocks.filter((b) => b.skip === null)) {
      expect(block.code, `README line ${block.line}`).not.toMatch(/\b(npm (start|install|test)|docker)\b/);
    }
  });

  it('is a user manual of at most about 15 KB, without lab-notebook text', () => {
    expect(Buffer.byteLength(README)).toBeLessThanOrEqual(16_000);
    for (const phrase of [/this machine/i, /this run\b/i, /yesterday/i, /this session/i, /\btarget\b/i, /CONTRACT\.md/, /the contract\b/i]) {
      expect(README).not.toMatch(phrase);
    }
  });

  it('links only to files that are in the repository (docs/ too)', () => {
    for (const file of ['README.md', 'docs/design.md', 'docs/postgres.md']) {
      const text = readFileSync(join(ROOT, file), 'utf8');
      for (const [, target] of text.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)) {
        if (/^[a-z]+:/.test(target!)) continue;
        expect(existsSync(join(ROOT, dirname(file), target!)), `${file} links to ${target}`).toBe(true);
      }
    }
  });

  describe('shell blocks, run twice in a row against a live server', () => {
    let server: ListeningServer;
    let work: string;
    let env: Record<string, string>;
    beforeAll(async () => {
      work = mkdtempSync(join(tmpdir(), 'statelog-readme-'));
      const db = join(work, 'data', 'statelog.db');
      server = await startServer({ STATELOG_DB: db });
      // The `statelog` command, as `npm link` installs it.
      const bin = join(work, 'bin');
      mkdirSync(bin);
      writeFileSync(join(bin, 'statelog'), `#!/bin/sh\nexec "${process.execPath}" "${join(ROOT, CLI_ENTRY)}" "$@"\n`);
      chmodSync(join(bin, 'statelog'), 0o755);
      env = {
        PATH: `${bin}:${process.env.PATH}`,
        HOME: process.env.HOME ?? work,
        STATELOG_URL: `http://127.0.0.1:${server.port}`,
        STATELOG_DB: db,
      };
    });
    afterAll(async () => {
      await server?.stop();
      rmSync(work, { recursive: true, force: true });
    });

    for (const round of [1, 2]) {
      it(`round ${round}: every block succeeds with no error answer`, { timeout: 180_000 }, async () => {
        for (const block of blocks.filter((b) => b.skip === null)) {
          const code = block.code.replaceAll('localhost:8080', `127.0.0.1:${server.port}`);
          const result = await runBlock(code, env, work);
          expect({ line: block.line, code: result.code }, result.output).toEqual({ line: block.line, code: 0 });
          expect(result.output, `README line ${block.line}`).not.toContain('"error":');
        }
      });
    }
  });
});
