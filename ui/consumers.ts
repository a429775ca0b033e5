// The "Consumers" panel: GET /v1/consumers as a table of name, position, lag, the time
// since the last commit and the hold. Each figure's cell carries the raw number in data-value.
import type { ConsumerList } from './api.js';
import { formatAgo, formatCount } from './format.js';

export interface ConsumerElements {
  rows: HTMLTableSectionElement;
  empty: HTMLElement;
}

type Consumer = ConsumerList['consumers'][number];

function cell(text: string, className = '', raw?: number | string): HTMLTableCellElement {
  const td = document.createElement('td');
  td.textContent = text;
  if (className) td.className = className;
  if (raw !== undefined) td.dataset.value = String(raw);
  return td;
}

function holdText(consumer: Consumer, now: number): string {
  if (consumer.hold) return 'holds compaction';
  if (consumer.holdReleasedAt !== undefined) return `released ${formatAgo(consumer.holdReleasedAt, now)} (too far behind)`;
  return 'none';
}

export function renderConsumers(el: ConsumerElements, list: ConsumerList, now = Date.now()): void {
  const rows = list.consumers.map((consumer) => {
    const tr = document.createElement('tr');
    tr.dataset.name = consumer.name;
    const name = consumer.owner ? `${consumer.name} (${consumer.owner})` : consumer.name;
    const when = cell('', 'when', consumer.committedAt);
    const time = document.createElement('time');
    time.dateTime = new Date(consumer.committedAt).toISOString();
    time.textContent = formatAgo(consumer.committedAt, now);
    when.append(time);
    const hold = cell(holdText(consumer, now), 'hold', consumer.hold ? 'held' : consumer.holdReleasedAt !== undefined ? 'released' : 'none');
    tr.append(cell(name, 'key'), cell(formatCount(consumer.offset), 'num', consumer.offset), cell(formatCount(consumer.lag), 'num lag', consumer.lag), when, hold);
    return tr;
  });
  el.rows.replaceChildren(...rows);
  el.empty.hidden = rows.length > 0;
}
