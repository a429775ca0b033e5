// The digest a snapshot sends in its last line: of the keys it sent. A whole snapshot
// takes the stored digest read with its offset; a filtered one (prefix or key) sums the
// terms of its lines as they stream (each line is parsed for its key and offset).
import { digestHex, digestTerm } from '../contract/digest.js';
import type { SnapshotReader } from '../store/log-store.js';

export class SnapshotDigest {
  private sum = 0n;

  constructor(
    private readonly reader: SnapshotReader,
    /** True when the snapshot sends every live key. */
    private readonly whole: boolean,
  ) {}

  /** Takes a page of JSON lines, each with "key" and "offset" members. */
  add(lines: string[]): void {
    if (this.whole) return;
    for (const line of lines) {
      const { key, offset } = JSON.parse(line) as { key: string; offset: number };
      this.sum += digestTerm(key, offset);
    }
  }

  /** Takes UTF-8 text of whole lines, each ended by a newline. */
  addText(text: Uint8Array): void {
    if (this.whole) return;
    const lines = Buffer.from(text.buffer, text.byteOffset, text.length).toString('utf8').split('\n');
    lines.pop();
    this.add(lines);
  }

  hex(): string {
    return digestHex(this.whole ? this.reader.digest : this.sum);
  }
}
