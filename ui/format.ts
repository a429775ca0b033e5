// How figures are written on the page.

const integer = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

export function formatCount(n: number): string {
  return integer.format(n);
}

const compact = new Intl.NumberFormat('en-US', { notation: 'compact', maximumFractionDigits: 1 });

/** 950, 12K, 1.5M: for the chart's scale. */
export function formatCompact(n: number): string {
  return compact.format(n);
}

export function formatRatio(ratio: number): string {
  return `${(ratio * 100).toFixed(ratio > 0 && ratio < 0.01 ? 2 : 1)} %`;
}

export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${bytes} B` : `${value.toFixed(value < 10 ? 2 : 1)} ${units[unit]}`;
}

export function formatDuration(ms: number): string {
  if (ms < 1) return `${ms.toFixed(2)} ms`;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
}

/** "just now", "12 s ago", "3 min ago", "2 h ago", "4 d ago". */
export function formatAgo(then: number, now = Date.now()): string {
  const s = Math.max(0, Math.round((now - then) / 1000));
  if (s < 2) return 'just now';
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86_400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86_400)} d ago`;
}

/** A commit time: the clock time when it is today, the date and time otherwise. */
export function formatTime(ts: number, now = Date.now()): string {
  const date = new Date(ts);
  const today = new Date(now).toDateString() === date.toDateString();
  const time = date.toLocaleTimeString('en-GB', { hour: '2-digit', minute: '2-digit', second: '2-digit' });
  return today ? time : `${date.toLocaleDateString('en-CA')} ${time}`;
}

/** A value as one line of JSON, cut at `max` characters. */
export function formatValue(value: unknown, max = 240): { text: string; cut: boolean; full: string } {
  const full = JSON.stringify(value) ?? 'null';
  return full.length <= max ? { text: full, cut: false, full } : { text: `${full.slice(0, max - 1)}…`, cut: true, full };
}

/**
 * The server lists keys in ascending UTF-8 byte order, which is code point order; the
 * `<` of JavaScript strings compares UTF-16 units and disagrees past U+FFFF.
 */
export function compareKeys(a: string, b: string): number {
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    const ca = a.codePointAt(i)!;
    const cb = b.codePointAt(j)!;
    if (ca !== cb) return ca < cb ? -1 : 1;
    i += ca > 0xffff ? 2 : 1;
    j += cb > 0xffff ? 2 : 1;
  }
  const restA = a.length - i;
  const restB = b.length - j;
  return restA === restB ? 0 : restA < restB ? -1 : 1;
}
