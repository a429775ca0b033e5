// A concurrent writer of random sets, deletes and increments, and the state it made,
// worked out from the server's acknowledgements alone: the truth the readers must match.
import { writeBatch, type State } from './stream-clients.js';

interface Acked {
  offset: number;
  key: string;
  /** JSON text of the value; null for a delete. */
  value: string | null;
}

export class RandomWriter {
  private readonly acked: Acked[] = [];
  private writing = false;
  private running: Promise<void>[] = [];

  constructor(
    private readonly base: string,
    private readonly keyName: (i: number) => string,
    private readonly keys: number,
  ) {}

  /** Writes every key once, as numbers, in batches of 1000. */
  async fill(): Promise<void> {
    for (let from = 0; from < this.keys; from += 1000) {
      const items = Array.from({ length: Math.min(1000, this.keys - from) }, (_, i) => ({ key: this.keyName(from + i), value: from + i }));
      await this.write(items);
    }
  }

  /** Starts `writers` loops of random batches until stop(). */
  start(writers = 4): void {
    this.writing = true;
    this.running = Array.from({ length: writers }, async (_, id) => {
      for (let round = id; this.writing; round += writers) await this.write(this.randomBatch(round));
    });
  }

  async stop(): Promise<void> {
    this.writing = false;
    await Promise.all(this.running);
    this.acked.sort((a, b) => a.offset - b.offset);
  }

  /** Every acknowledged offset, in order (after stop()). */
  get offsets(): number[] {
    return this.acked.map((w) => w.offset);
  }

  get head(): number {
    return this.acked.length === 0 ? 0 : this.acked[this.acked.length - 1]!.offset;
  }

  /** The state after every acknowledged write with offset <= n (after stop()). */
  stateAt(n: number): State {
    const state: State = new Map();
    for (const write of this.acked) {
      if (write.offset > n) break;
      if (write.value === null) state.delete(write.key);
      else state.set(write.key, write.value);
    }
    return state;
  }

  /** One random batch; a refused one (deleting a dead key, adding to an object) writes nothing. */
  private randomBatch(round: number): Record<string, unknown>[] {
    const items: Record<string, unknown>[] = [];
    const keys = new Set<string>();
    for (let i = 0; i < 1 + (round % 4); i++) {
      const key = this.keyName(Math.floor(Math.random() * this.keys));
      if (keys.has(key)) continue;
      keys.add(key);
      const dice = Math.random();
      if (dice < 0.2) items.push({ key, op: 'delete' });
      else if (dice < 0.6) items.push({ key, op: 'incr', by: Math.floor(Math.random() * 10) - 3 });
      else items.push({ key, value: Math.random() < 0.8 ? round : { round } });
    }
    return items;
  }

  private async write(items: Record<string, unknown>[]): Promise<void> {
    const answer = await writeBatch(this.base, items);
    if (answer.status !== 200) return;
    answer.body.records.forEach((written, i) => {
      const item = items[i]!;
      const value = item.op === 'delete' ? null : JSON.stringify(item.op === 'incr' ? written.value : item.value);
      this.acked.push({ offset: written.offset, key: written.key, value });
    });
  }
}
