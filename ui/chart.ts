// A small hand-drawn SVG line chart: records in the log and live keys over the last
// few minutes, one sample per stats poll. Compaction shows as a drop of the first line
// towards the second.
import { formatCompact, formatCount } from './format.js';

export interface Sample {
  t: number;
  records: number;
  liveKeys: number;
}

const SVG = 'http://www.w3.org/2000/svg';

function svg<K extends keyof SVGElementTagNameMap>(name: K, attributes: Record<string, string | number>): SVGElementTagNameMap[K] {
  const element = document.createElementNS(SVG, name);
  for (const [attribute, value] of Object.entries(attributes)) element.setAttribute(attribute, String(value));
  return element;
}

/** The top of the scale: four equal steps of 1, 2 or 5 times a power of ten, at or above `n`. */
export function scaleTop(n: number): number {
  const least = Math.max(n, 4) / 4;
  const power = 10 ** Math.floor(Math.log10(least));
  const step = [1, 2, 5, 10].map((m) => m * power).find((candidate) => candidate >= least)!;
  return step * 4;
}

function formatSpan(ms: number): string {
  const s = Math.round(ms / 1000);
  return s < 120 ? `${s} s ago` : `${Math.round(s / 60)} min ago`;
}

export class HistoryChart {
  private samples: Sample[] = [];
  private drawnWidth = 0;

  constructor(
    private readonly host: HTMLElement,
    private readonly windowMs = 5 * 60_000,
  ) {
    // The host's size is set by the style sheet, never by the drawing, so redrawing on a
    // resize cannot feed back into another resize.
    new ResizeObserver(() => {
      if (this.host.clientWidth !== this.drawnWidth) requestAnimationFrame(() => this.render());
    }).observe(host);
  }

  get size(): number {
    return this.samples.length;
  }

  add(sample: Sample): void {
    this.samples.push(sample);
    const from = sample.t - this.windowMs;
    while (this.samples.length > 2 && this.samples[1]!.t < from) this.samples.shift();
    this.render();
  }

  clear(): void {
    this.samples = [];
    this.render();
  }

  render(): void {
    this.drawnWidth = this.host.clientWidth;
    const width = Math.max(240, this.host.clientWidth || 600);
    const height = Math.max(120, this.host.clientHeight || 220);
    const pad = { left: 44, right: 14, top: 12, bottom: 26 };
    const plotW = width - pad.left - pad.right;
    const plotH = height - pad.top - pad.bottom;

    const last = this.samples.at(-1);
    const root = svg('svg', { width, height, viewBox: `0 0 ${width} ${height}`, role: 'img', class: 'chart-svg' });
    const title = svg('title', {});
    root.append(title);
    if (!last) {
      title.textContent = 'No samples yet';
      this.host.replaceChildren(root);
      return;
    }

    const now = last.t;
    const start = Math.max(this.samples[0]!.t, now - this.windowMs);
    const span = Math.max(20_000, now - start);
    const top = scaleTop(Math.max(...this.samples.map((s) => Math.max(s.records, s.liveKeys))) * 1.05);
    const x = (t: number) => pad.left + Math.max(0, (t - (now - span)) / span) * plotW;
    const y = (v: number) => pad.top + plotH - (v / top) * plotH;

    for (let i = 0; i <= 4; i += 1) {
      const value = (top / 4) * i;
      const at = y(value);
      root.append(svg('line', { x1: pad.left, x2: width - pad.right, y1: at, y2: at, class: i === 0 ? 'axis' : 'grid' }));
      const label = svg('text', { x: pad.left - 8, y: at + 4, 'text-anchor': 'end', class: 'tick' });
      label.textContent = formatCompact(value);
      root.append(label);
    }
    const left = svg('text', { x: pad.left, y: height - 6, 'text-anchor': 'start', class: 'tick' });
    left.textContent = formatSpan(span);
    const right = svg('text', { x: width - pad.right, y: height - 6, 'text-anchor': 'end', class: 'tick' });
    right.textContent = 'now';
    root.append(left, right);

    for (const [series, pick] of [
      ['records', (s: Sample) => s.records],
      ['live', (s: Sample) => s.liveKeys],
    ] as const) {
      const points = this.samples.map((s) => `${x(s.t).toFixed(1)},${y(pick(s)).toFixed(1)}`).join(' ');
      root.append(svg('polyline', { points, class: `line ${series}`, 'data-series': series }));
      root.append(svg('circle', { cx: x(last.t), cy: y(pick(last)), r: 3.5, class: `dot ${series}` }));
    }

    title.textContent =
      `Records in the log and live keys over the last ${formatSpan(span).replace(' ago', '')}: ` +
      `now ${formatCount(last.records)} records and ${formatCount(last.liveKeys)} live keys`;
    this.host.replaceChildren(root);
  }
}
