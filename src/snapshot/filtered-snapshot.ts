// A snapshot that shows some of another's lines: the same offset, epoch and digest of
// the whole state; only nextJson differs.
import type { SnapshotReader, SnapshotShape } from '../store/log-store.js';

export abstract class FilteredSnapshot implements SnapshotReader {
  constructor(protected readonly inner: SnapshotReader) {}

  get offset(): number {
    return this.inner.offset;
  }

  get epoch(): string {
    return this.inner.epoch;
  }

  get lineage(): string | undefined {
    return this.inner.lineage;
  }

  get digest(): bigint {
    return this.inner.digest;
  }

  abstract nextJson(shape: SnapshotShape, max: number, maxChars?: number): Promise<string[]>;

  close(): void {
    this.inner.close();
  }
}
