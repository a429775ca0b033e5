// A failed fsync in the real server process. A shim preloaded into the child (a few lines
// of C, compiled here) makes fsync and fdatasync fail with EIO once a trigger file
// exists, as a disk that fails its flushes would. After a failed fsync the kernel may
// have dropped the pages, so nothing more can be promised durable: the process stops at
// once with one line saying so, no write in flight is acknowledged, and a restart
// without the shim recovers every write acknowledged before. Skipped without a C compiler.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { expectAllThere, putValue, Writers } from './support/acked-writes.js';
import { childServers } from './support/child-server.js';

const SHIM = `
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static int failing(void) {
  const char *trigger = getenv("STATELOG_TEST_FAIL_FSYNC_WHEN");
  return trigger != NULL && access(trigger, F_OK) == 0;
}

int fdatasync(int fd) {
  static int (*real)(int);
  if (failing()) { errno = EIO; return -1; }
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
  return real(fd);
}

int fsync(int fd) {
  static int (*real)(int);
  if (failing()) { errno = EIO; return -1; }
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  return real(fd);
}
`;

const shimDir = mkdtempSync(join(tmpdir(), 'statelog-fsync-shim-'));
afterAll(() => rmSync(shimDir, { recursive: true, force: true }));

/** The shim as a shared library, or null (with the reason on the console) when there is no C compiler. */
function compileShim(): string | null {
  writeFileSync(join(shimDir, 'fail-fsync.c'), SHIM);
  const library = join(shimDir, 'fail-fsync.so');
  try {
    execFileSync(process.env.CC ?? 'cc', ['-shared', '-fPIC', '-o', library, join(shimDir, 'fail-fsync.c'), '-ldl'], { stdio: 'pipe' });
    return library;
  } catch (err) {
    console.log(`skipped: no C compiler to build the fsync shim (${(err as Error).message.split('\n')[0]})`);
    return null;
  }
}

const shim = compileShim();
const servers = childServers();

describe.runIf(shim)('a failed fsync in the real process', () => {
  it('stops with one line, acknowledges no write in flight, and a restart recovers every acknowledged write', async () => {
    const trigger = join(servers.dir, 'fail-fsync-now');
    const server = await servers.start({ LD_PRELOAD: shim!, STATELOG_TEST_FAIL_FSYNC_WHEN: trigger });
    const writers = new Writers(4, (w, i) => putValue(server.url, `w${w}/k${i}`, `{"w":${w},"i":${i}}`));
    await vi.waitFor(() => expect(writers.acked.length).toBeGreaterThan(100), { timeout: 30_000, interval: 50 });
    // Every fsync from here on fails: a write sent from now on commits after that, so
    // the fsync that would cover it fails too.
    writeFileSync(trigger, '');
    writers.markSent();
    // The writers may all be waiting on answers that never come; these are surely sent
    // after the trigger (or refused at the socket once the process is gone).
    const late = await Promise.allSettled(Array.from({ length: 5 }, (_, i) => putValue(server.url, `late/${i}`, String(i))));
    const exit = await server.exited;
    await writers.done;

    expect(exit).toEqual({ code: 1, signal: null });
    expect(late.flatMap((result) => (result.status === 'fulfilled' ? (result.value.acked ?? []) : []))).toEqual([]);
    expect(writers.acknowledgedAfterMark).toEqual([]);
    // One line, in the log, and nothing on stderr.
    const alarms = server.logs().filter((line) => (line.level as number) >= 50);
    expect(alarms.map((line) => [line.level, line.msg])).toEqual([[60, expect.stringMatching(/fsync .*failed.*nothing more can be promised durable/)]]);
    expect(server.stderr()).toBe('');

    const restarted = await servers.start();
    await expectAllThere(restarted.url, writers.acked);
  }, 90_000);
});
