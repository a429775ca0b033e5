// Snapshots shared by the requests that may have the same state, as writes share a commit
// (docs/design.md, "Snapshots and slow readers"); each reader reads the spool at its own pace.
import { showsEverything, type ReadFilter } from '../contract/key-scope.js';
import type { LogStore, SnapshotShape } from '../store/log-store.js';
import { ScopedSnapshot } from './scoped-reads.js';
import { Slots } from './slots.js';
import { openSpool, type Spool, type SpooledSnapshot } from './snapshot-spool.js';
import { checkSpoolFolder, type SpoolBudget } from './spool-budget.js';

export interface SharedSnapshotSettings {
  maxReads: number;
  dir: string;
  budget: SpoolBudget;
  /** How long a finished spool goes on serving requests that accept its offset. */
  keepMs: number;
  signal: AbortSignal;
  onRead?: () => void;
}

export interface SnapshotWanted {
  filter: Pick<ReadFilter, 'prefix' | 'within'>;
  shape: SnapshotShape;
  /** The oldest state that will do. */
  minOffset: number;
}

class Shared {
  /** The least offset its state will have: null while it waits for the read before it, then the head, then the snapshot's. */
  atLeast: number | null = null;
  spool: Spool | null = null;
  /** The spool once readers may start; rejects when it could not be made. */
  opening!: Promise<Spool>;
  readonly readOver: Promise<void>;
  readonly over: () => void;

  constructor() {
    let over!: () => void;
    this.readOver = new Promise((resolve) => (over = resolve));
    this.over = over;
  }
}

export class SharedSnapshots {
  private readonly reads: Slots;
  /** Per shape and filter, oldest first: spools being read, kept, or waiting to start. */
  private readonly shared = new Map<string, Shared[]>();

  constructor(
    private readonly store: LogStore,
    private readonly settings: SharedSnapshotSettings,
  ) {
    this.reads = new Slots(settings.maxReads, 'snapshots are already being read');
  }

  checkFolder(): Promise<void> {
    return checkSpoolFolder(this.settings.dir, this.settings.budget);
  }

  /** Shares nothing read before now: the database may have changed under the node. Readers attached keep theirs. */
  rewind(): void {
    this.shared.clear();
  }

  /** A reader at `minOffset` or later, its first bytes spooled; 429 when a new read is needed and none is free. */
  async open(wanted: SnapshotWanted): Promise<{ reader: SpooledSnapshot; shared: boolean }> {
    const { prefix, within } = wanted.filter;
    const key = [wanted.shape, prefix, ...(within ?? [])].join('\u0000');
    const list = this.shared.get(key) ?? [];
    const joined = list.find((entry) => accepts(entry, wanted.minOffset));
    const entry = joined ?? this.start(key, list, wanted);
    const spool = await entry.opening;
    // It may have failed meanwhile (shutdown, no room): that failure is this request's too.
    if (spool.failure) throw spool.failure.err;
    return { reader: spool.attach(), shared: joined !== undefined };
  }

  /** A new read of the store, begun once the one of the same key is over, so that requests arriving meanwhile share it. */
  private start(key: string, list: Shared[], wanted: SnapshotWanted): Shared {
    const giveSlot = this.reads.acquire();
    const previous = list.findLast((entry) => entry.spool === null || !entry.spool.done);
    const { dir, budget, signal, keepMs } = this.settings;
    const entry = new Shared();
    entry.opening = (async () => {
      await previous?.readOver;
      entry.atLeast = this.store.position().head;
      const opened = await this.store.openSnapshot(wanted.filter.prefix);
      entry.atLeast = opened.offset;
      const within = wanted.filter.within;
      const reader = within ? new ScopedSnapshot(opened, within) : opened;
      const digest = wanted.shape === 'entry' ? { whole: showsEverything(wanted.filter) } : undefined;
      const { spool, release } = await openSpool(reader, wanted.shape, dir, budget, { signal, digest });
      this.settings.onRead?.();
      entry.spool = spool;
      void spool.stopped.then(() => {
        giveSlot();
        entry.over();
        keep(spool.done ? keepMs : 0, release);
      });
      return spool;
    })();
    const forget = (): void => {
      const at = list.indexOf(entry);
      if (at >= 0) list.splice(at, 1);
      if (list.length === 0 && this.shared.get(key) === list) this.shared.delete(key);
    };
    // A finished spool goes on serving for `ms`, or until shutdown.
    const keep = (ms: number, release: () => void): void => {
      const drop = (): void => {
        clearTimeout(timer);
        signal.removeEventListener('abort', drop);
        forget();
        release();
      };
      const timer = setTimeout(drop, ms).unref();
      signal.addEventListener('abort', drop);
    };
    entry.opening.catch(() => {
      giveSlot();
      entry.over();
      forget();
    });
    list.push(entry);
    this.shared.set(key, list);
    return entry;
  }
}

function accepts(entry: Shared, minOffset: number): boolean {
  if (entry.spool && !entry.spool.usable) return false;
  return entry.atLeast === null || entry.atLeast >= minOffset;
}
