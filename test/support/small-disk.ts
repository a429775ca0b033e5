// A size-limited file system for tests of a full disk: a tmpfs mounted on a new folder,
// whose writes past the limit fail with a real ENOSPC; a filler file takes the space and
// gives it back. Mounting needs root (or CAP_SYS_ADMIN): elsewhere `mounted` is false
// and the tests that need it are skipped.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, statfsSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface SmallDisk {
  dir: string;
  mounted: boolean;
  /** Takes all but `leave` bytes of the file system. */
  fill(leave: number): void;
  /** Gives the filler's space back. */
  free(): void;
  /** Unmounts and removes the folder. */
  remove(): void;
}

/** `owner`: the mount's root belongs to this user and group (a PostgreSQL server's), mode 0700. */
export function smallDisk(size: string, owner?: { uid: number; gid: number }): SmallDisk {
  const dir = mkdtempSync(join(tmpdir(), 'statelog-full-'));
  const options = [`size=${size}`, ...(owner ? [`uid=${owner.uid}`, `gid=${owner.gid}`, 'mode=0700'] : [])].join(',');
  let mounted = false;
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', options, 'tmpfs', dir], { stdio: 'ignore' });
    mounted = true;
  } catch (err) {
    console.log(`skipped: cannot mount a size-limited tmpfs (needs root or CAP_SYS_ADMIN): ${(err as Error).message.split('\n')[0]}`);
  }
  const filler = join(dir, 'filler');
  return {
    dir,
    mounted,
    fill(leave) {
      rmSync(filler, { force: true });
      const { bavail, bsize } = statfsSync(dir);
      writeFileSync(filler, Buffer.alloc(Math.max(0, bavail * bsize - leave)));
    },
    free() {
      rmSync(filler, { force: true });
    },
    remove() {
      if (mounted) execFileSync('umount', ['-l', dir]);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
