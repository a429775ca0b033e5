// A snapshot of one key, read from a snapshot of the keys that start with it: the key
// itself sorts first among them, so one row tells whether it is live.
import type { SnapshotReader, SnapshotShape } from '../store/log-store.js';
import { FilteredSnapshot } from './filtered-snapshot.js';

export class OneKeySnapshot extends FilteredSnapshot {
  private done = false;

  constructor(
    prefixed: SnapshotReader,
    private readonly key: string,
  ) {
    super(prefixed);
  }

  async nextJson(shape: SnapshotShape, _max: number, maxChars?: number): Promise<string[]> {
    if (this.done) return [];
    this.done = true;
    const [first] = await this.inner.nextJson(shape, 1, maxChars);
    if (first === undefined) return [];
    return (JSON.parse(first) as { key: string }).key === this.key ? [first] : [];
  }
}
