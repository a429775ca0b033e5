// A snapshot of one key, read from a snapshot of the keys that start with it: the key
// itself sorts first among them, so one row tells whether it is live.
import type { SnapshotReader, SnapshotShape } from '../store/log-store.js';

export class OneKeySnapshot implements SnapshotReader {
  private done = false;

  constructor(
    private readonly prefixed: SnapshotReader,
    private readonly key: string,
  ) {}

  get offset(): number {
    return this.prefixed.offset;
  }

  get epoch(): string {
    return this.prefixed.epoch;
  }

  get digest(): bigint {
    return this.prefixed.digest;
  }

  async nextJson(shape: SnapshotShape, _max: number, maxChars?: number): Promise<string[]> {
    if (this.done) return [];
    this.done = true;
    const [first] = await this.prefixed.nextJson(shape, 1, maxChars);
    if (first === undefined) return [];
    return (JSON.parse(first) as { key: string }).key === this.key ? [first] : [];
  }

  close(): void {
    this.prefixed.close();
  }
}
