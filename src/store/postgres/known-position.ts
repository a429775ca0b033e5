// What a node knows of the shared log without asking: the highest head and horizon it has
// learnt, and the lineage. Heads only move forward, except when the database may have changed
// under the node (a connection broke: a failover may have promoted a standby that lacks the
// last records); the next read of the meta row is then taken as it is, and the node's copies
// in memory are dropped (LogStore.watchRewind).
import type { LogPosition } from '../log-store.js';
import { parseLineage } from '../../contract/lineage.js';

const lastGeneration = (lineage: string): number => {
  const generations = parseLineage(lineage);
  return generations[generations.length - 1]!.n;
};

export class KnownPosition {
  private known: LogPosition = { head: 0, horizon: 0, epoch: '' };
  /** Set when a connection broke: the next authoritative read replaces what is known. */
  private suspect = false;
  private readonly headWatchers = new Set<(head: number) => void>();
  private readonly rewindWatchers = new Set<(position: LogPosition) => void>();

  get value(): LogPosition {
    return { ...this.known };
  }

  watchHead(onHead: (head: number) => void): () => void {
    this.headWatchers.add(onHead);
    return () => this.headWatchers.delete(onHead);
  }

  watchRewind(onRewind: (position: LogPosition) => void): () => void {
    this.rewindWatchers.add(onRewind);
    return () => this.rewindWatchers.delete(onRewind);
  }

  /** A connection to the database broke: what the node holds may be of another history. */
  lost(): void {
    if (this.suspect) return;
    this.suspect = true;
    this.rewind();
  }

  /** The meta row as read in one statement (head, horizon, epoch, lineage together). */
  read(position: LogPosition): void {
    const { known } = this;
    const forked = position.lineage !== undefined && known.lineage !== undefined && position.lineage !== known.lineage
      && lastGeneration(position.lineage) > lastGeneration(known.lineage);
    if (this.suspect || forked || position.epoch !== known.epoch) {
      const rewound = position.head < known.head || position.lineage !== known.lineage || position.epoch !== known.epoch;
      this.suspect = false;
      this.known = { ...position };
      if (rewound && known.epoch !== '') this.rewind();
      else if (position.head > known.head) for (const watcher of this.headWatchers) watcher(position.head);
      return;
    }
    this.learn(position, true);
  }

  /** Keeps the highest head and horizon seen; `fromElsewhere` tells the watchers of a new head. */
  learn(position: { head: number; horizon?: number }, fromElsewhere: boolean): void {
    const { known } = this;
    if (position.horizon !== undefined && position.horizon > known.horizon) known.horizon = position.horizon;
    if (position.head <= known.head) return;
    known.head = position.head;
    if (fromElsewhere) for (const watcher of this.headWatchers) watcher(position.head);
  }

  private rewind(): void {
    const position = this.value;
    for (const watcher of this.rewindWatchers) watcher(position);
  }
}
