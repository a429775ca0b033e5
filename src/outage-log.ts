// Log lines about the database being out of reach, one per cause per interval: a node whose
// database is gone for a minute says so a few times, not at every timer's tick. Each occurrence
// is still counted (statelog_outage_errors_total); an error that is no outage is always logged.
import { storeErrorKind } from './store/store-errors.js';

/** Between two lines of the same cause. */
export const OUTAGE_LOG_INTERVAL_MS = 10_000;

type LogMethod = (fields: object, message: string) => void;

export class OutageLog {
  private readonly lastAt = new Map<string, { at: number; suppressed: number }>();

  constructor(
    private readonly log: { error: LogMethod; warn: LogMethod },
    private readonly counted: (cause: string) => void,
    private readonly intervalMs = OUTAGE_LOG_INTERVAL_MS,
  ) {}

  error: LogMethod = (fields, message) => this.write('error', fields, message);

  warn: LogMethod = (fields, message) => this.write('warn', fields, message);

  private write(level: 'error' | 'warn', fields: object, message: string): void {
    const kind = storeErrorKind((fields as { err?: unknown }).err);
    if (kind === null || kind === 'corrupt') return this.log[level](fields, message);
    const cause = `${message} (${kind})`;
    this.counted(cause);
    const now = Date.now();
    const last = this.lastAt.get(cause);
    if (last && now - last.at < this.intervalMs) {
      last.suppressed += 1;
      return;
    }
    this.lastAt.set(cause, { at: now, suppressed: 0 });
    const { err } = fields as { err?: Error & { code?: unknown } };
    // An outage is not a bug: its message and code, no stack.
    const brief = err ? { err: { message: err.message, code: err.code } } : {};
    this.log.warn({ ...fields, ...brief, ...(last?.suppressed ? { suppressed: last.suppressed } : {}) }, message);
  }
}
