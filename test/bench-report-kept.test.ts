// docs/BENCHMARKS.md is rendered from results, but sections marked as written by hand
// survive a re-render (bench/shared/report.ts keptSections).
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { keptSections } from '../bench/shared/report.js';

describe('keptSections', () => {
  it('keeps every marked block as written, and nothing else', () => {
    const page = 'generated\n<!-- kept -->\n## Mine\n\ntext\n<!-- /kept -->\nmore generated\n<!-- kept -->\nsecond\n<!-- /kept -->\n';
    expect(keptSections(page)).toBe('\n<!-- kept -->\n## Mine\n\ntext\n<!-- /kept -->\n\n<!-- kept -->\nsecond\n<!-- /kept -->\n');
    expect(keptSections('only generated\n')).toBe('');
  });

  it("finds the page's own hand-written sections", () => {
    expect(keptSections(readFileSync(new URL('../docs/BENCHMARKS.md', import.meta.url), 'utf8'))).toContain('## Batch records: where the CPU goes');
  });
});
