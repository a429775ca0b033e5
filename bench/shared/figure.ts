// What a figure of the suite is: bench/run.ts runs figures, bench/shared/report.ts renders
// their results. A bench script joins the suite by exporting a Figure and adding one
// line to FIGURES in bench/run.ts.

/** How big and how long: chosen by the runner, read by every figure. */
export interface RunSettings {
  /** A few seconds and tiny data: checks that the harness works, measures nothing. */
  smoke: boolean;
  /** The full-size runs of the figures that have one (compaction, recovery). */
  full: boolean;
  /** Measured rounds (at least 3 in a real run). */
  rounds: number;
  /** Seconds of load for one side of one round. */
  seconds: number;
  /** Seconds of warm-up load for each side before the first round. */
  warmupSeconds: number;
  log(line: string): void;
}

/** A goal from the issue: the median must be >= (or <=) the value. */
export interface Target {
  op: '>=' | '<=';
  value: number;
}

/** One measured quantity: one value per run; the report shows median and min–max. */
export interface Metric {
  label: string;
  unit: string;
  values: number[];
  target?: Target;
  /** Decimals shown in the report (default: 0 above 100, else 2). */
  digits?: number;
}

/** A system in a side-by-side comparison, for the peers table and the chart. */
export interface SystemResult {
  name: string;
  /** A plain statement of whether and when it fsyncs a write before answering. */
  fsync: string;
  rps: number[];
  p50: number[];
  p99: number[];
  errors: number;
}

export interface FigureResult {
  /** The sizes and settings it ran with, in words (shown in the table). */
  scale: string;
  settings: Record<string, unknown>;
  metrics: Metric[];
  systems?: SystemResult[];
  /** Versions of outside software it measured (etcd, nats-server, PostgreSQL). */
  versions?: Record<string, string>;
  /** Anything else worth keeping in the JSON (per-round detail). */
  details?: unknown;
  notes?: string[];
}

export interface Figure {
  /** The name given to --only. */
  name: string;
  title: string;
  run(settings: RunSettings): Promise<FigureResult>;
}

export function met(metric: Metric, median: number): boolean | null {
  if (!metric.target) return null;
  return metric.target.op === '>=' ? median >= metric.target.value : median <= metric.target.value;
}

/**
 * Runs `rounds` rounds of `measure` over every side, rotating which side goes first in
 * each round, so drift in the machine's load hits every side alike. Returns each side's
 * results in round order (index i of every side is the same round).
 */
export async function alternate<S extends string, T>(
  rounds: number,
  sides: readonly S[],
  measure: (side: S, round: number) => Promise<T>,
): Promise<Record<S, T[]>> {
  const results = Object.fromEntries(sides.map((side) => [side, [] as T[]])) as Record<S, T[]>;
  for (let round = 0; round < rounds; round++) {
    for (let i = 0; i < sides.length; i++) {
      const side = sides[(i + round) % sides.length]!;
      results[side].push(await measure(side, round));
    }
  }
  return results;
}

/** Per-round ratios a[i] / b[i]. */
export const ratios = (a: number[], b: number[]) => a.map((value, i) => value / b[i]!);
