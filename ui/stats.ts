// The "Log health" panel: the figures of GET /v1/stats. Each figure's element also
// carries the raw number in data-value.
import type { Stats } from './api.js';
import { formatAgo, formatBytes, formatCount, formatDuration, formatRatio } from './format.js';

const TRIGGERS = { dirty_ratio: 'timer, dirty ratio', max_lag: 'timer, max lag', admin: 'compact now' } as const;

export interface StatsElements {
  head: HTMLElement;
  records: HTMLElement;
  liveKeys: HTMLElement;
  tombstones: HTMLElement;
  dirtyRatio: HTMLElement;
  horizon: HTMLElement;
  dbBytes: HTMLElement;
  lastCompaction: HTMLElement;
  updated: HTMLElement;
}

function show(element: HTMLElement, raw: number, text: string): void {
  element.dataset.value = String(raw);
  element.textContent = text;
}

export function renderStats(el: StatsElements, stats: Stats, now = Date.now()): void {
  show(el.head, stats.head, formatCount(stats.head));
  show(el.records, stats.records, formatCount(stats.records));
  show(el.liveKeys, stats.liveKeys, formatCount(stats.liveKeys));
  show(el.tombstones, stats.tombstones, formatCount(stats.tombstones));
  show(el.dirtyRatio, stats.dirtyRatio, formatRatio(stats.dirtyRatio));
  show(el.horizon, stats.horizon, formatCount(stats.horizon));
  show(el.dbBytes, stats.dbBytes, formatBytes(stats.dbBytes));

  const last = stats.lastCompaction;
  if (last === null) {
    el.lastCompaction.dataset.value = '';
    el.lastCompaction.textContent = 'none since the server started';
  } else {
    el.lastCompaction.dataset.value = String(last.startedAt);
    const when = document.createElement('time');
    when.dateTime = new Date(last.startedAt).toISOString();
    when.textContent = formatAgo(last.startedAt, now);
    const detail = document.createElement('span');
    detail.className = 'detail';
    const tombstones = last.tombstonesRemoved === 1 ? '1 tombstone' : `${formatCount(last.tombstonesRemoved)} tombstones`;
    detail.textContent =
      `removed ${formatCount(last.removed)} records (${tombstones}) in ${formatDuration(last.durationMs)}; ` +
      `${formatBytes(last.bytesBefore)} → ${formatBytes(last.bytesAfter)}; ${TRIGGERS[last.trigger]}`;
    el.lastCompaction.replaceChildren(when, detail);
  }
  el.updated.textContent = `Updated ${new Date(now).toLocaleTimeString('en-GB')}`;
}
