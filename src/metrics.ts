// Prometheus metrics for /metrics. A registry per app (never prom-client's global one), so
// that apps share a process; the store's figures are read when scraped, so never stale.
import { readFileSync } from 'node:fs';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { dirtyRatio, type LogStore, type StoreCounters } from './store/log-store.js';
import { storeErrorKind } from './store/store-errors.js';
import { viewOf } from './store/consumer-rules.js';

/** The route label of a request that matched no route: raw URLs would explode the label set. */
export const UNMATCHED_ROUTE = 'unmatched';

export type StreamKind = 'sse' | 'long_poll' | 'snapshot';
const REQUEST_LABELS = ['method', 'route', 'status'] as const;
type RequestLabel = (typeof REQUEST_LABELS)[number];

const STREAM_KINDS: readonly StreamKind[] = ['sse', 'long_poll', 'snapshot'];

/** prom-client defaults that `promtool check metrics` refuses (gauges named like counters); their labelled siblings stay. */
const DROPPED_DEFAULTS = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'];

/** This package's version, from the package.json one folder above this file (src/ or dist/). */
function packageVersion(): string {
  try {
    return (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

/** Running totals kept by the compactor, read at each scrape. */
export interface CompactionStats {
  runs: number;
  failures: number;
  removed: number;
  tombstonesRemoved: number;
  lastDurationMs: number;
  totalDurationMs: number;
  lastSuccessMs: number | null;
}

const NO_COMPACTION: CompactionStats = {
  runs: 0,
  failures: 0,
  removed: 0,
  tombstonesRemoved: 0,
  lastDurationMs: 0,
  totalDurationMs: 0,
  lastSuccessMs: null,
};

class MirroredCounter {
  private readonly counter: Counter;

  constructor(registry: Registry, name: string, help: string) {
    this.counter = new Counter({ name, help, registers: [registry] });
  }

  set(total: number): void {
    this.counter.reset();
    this.counter.inc(total);
  }
}

/** One method, route and status: its requests, and the durations of those that are timed. */
interface RequestSeries {
  labels: Record<RequestLabel, string>;
  count: number;
  /** Not cumulative; the last counts those above every bound. */
  buckets: number[];
  timed: number;
  sumSeconds: number;
}

const REQUEST_DURATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

// The request-duration histogram, read at scrape time from plain numbers (a prom-client Histogram
// hashes its labels on every observe()), rendered as prom-client renders a Histogram.
class RequestDurations {
  readonly type = 'histogram';
  readonly aggregator = 'sum';

  constructor(
    registry: Registry,
    readonly name: string,
    readonly help: string,
    private readonly series: () => Iterable<RequestSeries>,
  ) {
    // The registry takes any object with a name and get() (its types list only its own classes).
    registry.registerMetric(this as unknown as Histogram);
  }

  get() {
    const values = [];
    for (const { labels, buckets, timed, sumSeconds } of this.series()) {
      if (timed === 0) continue;
      let cumulative = 0;
      for (let i = 0; i < REQUEST_DURATION_BUCKETS.length; i++) {
        cumulative += buckets[i]!;
        values.push({ labels: { le: REQUEST_DURATION_BUCKETS[i]! }, sharedLabels: labels, value: cumulative, metricName: `${this.name}_bucket` });
      }
      values.push(
        { labels: { le: '+Inf' }, sharedLabels: labels, value: timed, metricName: `${this.name}_bucket` },
        { labels: {}, sharedLabels: labels, value: sumSeconds, metricName: `${this.name}_sum` },
        { labels: {}, sharedLabels: labels, value: timed, metricName: `${this.name}_count` },
      );
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }
}

export class Metrics {
  readonly registry = new Registry();
  // Apart, so that while the database cannot be read its gauges are left out (neither stale
  // nor zero) and the rest, which an operator needs most during an outage, is still served.
  private readonly logRegistry = new Registry();
  private compaction: () => CompactionStats = () => NO_COMPACTION;

  private readonly requests = new Counter({
    name: 'statelog_http_requests_total',
    help: 'HTTP requests answered, by method, route pattern and status',
    labelNames: REQUEST_LABELS,
    registers: [this.registry],
    // Counted as a plain number and copied in at each scrape: prom-client's inc() re-hashes its labels.
    collect: () => {
      this.requests.reset();
      for (const series of this.requestSeries.values()) this.requests.inc(series.labels, series.count);
    },
  });
  private readonly durations = new RequestDurations(
    this.registry,
    'statelog_http_request_duration_seconds',
    'Time to answer HTTP requests, by method, route pattern and status; streams, long polls that waited and snapshots are in statelog_stream_duration_seconds instead',
    () => this.requestSeries.values(),
  );
  /** Kept apart from the requests' histogram: answers that stay open by design are not slow requests. */
  private readonly streamDurations = new Histogram({
    name: 'statelog_stream_duration_seconds',
    help: 'How long SSE streams, long polls that waited, and snapshots stayed open, by kind',
    labelNames: ['kind'] as const,
    // Long polls wait up to 60 s; streams last minutes to hours.
    buckets: [0.1, 1, 10, 30, 60, 300, 1800, 3600, 4 * 3600, 24 * 3600],
    registers: [this.registry],
  });
  private readonly streamed = new WeakSet<object>();
  /** Bounded: routes are patterns, methods and statuses few (fastify refuses unknown methods before routing). */
  private readonly requestSeries = new Map<string, RequestSeries>();
  /** Requests by token entry name: bounded by the names the token files ever held. */
  private readonly tokenRequests = new Map<string, number>();
  private readonly byToken = new Counter({
    name: 'statelog_http_requests_by_token_total',
    help: 'HTTP requests answered, by the token entry that made them (its name; never the secret)',
    labelNames: ['token'] as const,
    registers: [this.registry],
    collect: () => {
      this.byToken.reset();
      for (const [token, count] of this.tokenRequests) this.byToken.inc({ token }, count);
    },
  });
  private readonly reloadFailures = new Counter({
    name: 'statelog_reload_failures_total',
    help: 'SIGHUP reloads refused (a token file, certificate or client CA that cannot be used); what was in force stays',
    registers: [this.registry],
  });
  private readonly written = new Counter({
    name: 'statelog_records_written_total',
    help: 'Records this process appended to the log (sets and delete markers)',
    registers: [this.registry],
  });
  /** The durable write path's latency, as etcd's etcd_disk_wal_fsync_duration_seconds shows the disk's. */
  private readonly groupCommits = new Histogram({
    name: 'statelog_group_commit_duration_seconds',
    help: 'Time from a group commit starting to its writes being durable (SQLite: the transaction and its fsync; PostgreSQL: the append and the barrier that makes it durable)',
    buckets: [0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096],
    registers: [this.registry],
  });
  /** How often the whole state is read for snapshots: shared snapshots keep it below the readers' count. */
  private readonly snapshotReads = new Counter({
    name: 'statelog_snapshot_reads_total',
    help: 'Snapshots read from the store (each may serve many readers)',
    registers: [this.registry],
  });
  /** Change reads near the head come from memory: `store` counts those behind the window. */
  private readonly feedReads = new Counter({
    name: 'statelog_feed_reads_total',
    help: 'Pages of changes read for long polls and streams, from the in-memory tail window or from the store',
    labelNames: ['from'] as const,
    registers: [this.registry],
  });
  private readonly outageErrors = new Counter({
    name: 'statelog_outage_errors_total',
    help: 'Failures of background work (expiry, watching other nodes, purges) because the database could not be used, by cause; logged once per cause per interval',
    labelNames: ['cause'] as const,
    registers: [this.registry],
  });
  private readonly rewinds = new Counter({
    name: 'statelog_rewinds_total',
    help: 'Times this node dropped what it kept in memory of the log because the database may have changed under it (a broken connection, a failover)',
    registers: [this.registry],
  });
  private readonly sharedPagesKept = new Gauge({
    name: 'statelog_shared_pages_bytes',
    help: 'Memory held by the pages kept at the head for sharing among long polls and streams (STATELOG_SHARED_PAGES_MAX_BYTES)',
    registers: [this.registry],
  });
  private readonly sharedPagesEvicted = new Counter({
    name: 'statelog_shared_pages_evicted_total',
    help: 'Pages at the head dropped, or not kept, for want of room within STATELOG_SHARED_PAGES_MAX_BYTES',
    registers: [this.registry],
  });
  private readonly snapshotsServed = new Counter({
    name: 'statelog_snapshots_served_total',
    help: 'Snapshots answered, each from a read of the store shared or its own, and 304s',
    labelNames: ['from'] as const,
    registers: [this.registry],
  });
  private readonly streams = new Gauge({
    name: 'statelog_open_streams',
    help: 'Answers still streaming or waiting: SSE streams, long polls, snapshots',
    labelNames: ['kind'] as const,
    registers: [this.registry],
  });

  private readonly databaseUp = this.gauge('statelog_database_up', 'Whether the database answered this scrape (1) or could not be reached (0)');
  private readonly log = {
    head: this.gauge('statelog_log_head', 'Highest offset ever assigned', this.logRegistry),
    horizon: this.gauge('statelog_log_horizon', 'Highest offset of a removed live delete marker', this.logRegistry),
    records: this.gauge('statelog_log_records', 'Records in the log, superseded ones included', this.logRegistry),
    liveKeys: this.gauge('statelog_live_keys', 'Keys with a live value', this.logRegistry),
    expiredKeys: this.gauge('statelog_expired_keys', 'Keys past their expiry whose tombstone is not written yet', this.logRegistry),
    tombstones: this.gauge('statelog_tombstones', 'Keys whose latest record is a delete marker still kept', this.logRegistry),
    dirtyRatio: this.gauge('statelog_dirty_ratio', 'Superseded records / all records', this.logRegistry),
    dbBytes: this.gauge('statelog_db_bytes', 'Size of the database file and its write-ahead log', this.logRegistry),
  };

  private readonly compactionMetrics = {
    runs: new MirroredCounter(this.registry, 'statelog_compaction_runs_total', 'Compaction runs finished'),
    failures: new MirroredCounter(this.registry, 'statelog_compaction_failures_total', 'Compaction runs that failed'),
    removed: new MirroredCounter(this.registry, 'statelog_compaction_removed_records_total', 'Records removed by compaction'),
    tombstonesRemoved: new MirroredCounter(
      this.registry,
      'statelog_compaction_tombstones_removed_total',
      'Delete markers removed by compaction',
    ),
    totalDuration: new MirroredCounter(
      this.registry,
      'statelog_compaction_duration_seconds_total',
      'Time spent in compaction runs',
    ),
    lastDuration: this.gauge('statelog_compaction_last_duration_seconds', 'Duration of the last compaction run'),
    lastSuccess: this.gauge(
      'statelog_last_compaction_success_timestamp_seconds',
      'When the last successful compaction run of this process finished (Unix time), 0 before the first',
    ),
  };

  private readonly consumerMetrics = {
    lag: this.consumerGauge('statelog_consumer_lag_records', "Records between a consumer's committed position and the head"),
    age: this.consumerGauge('statelog_consumer_commit_age_seconds', "Seconds since a consumer's last commit"),
    holding: this.consumerGauge('statelog_consumer_hold', 'Whether a consumer holds compaction (1) or not (0)'),
    releases: new MirroredCounter(this.registry, 'statelog_consumer_hold_releases_total', 'Consumer holds this process released for lag or age'),
  };
  private consumerHolds: () => number = () => 0;

  private readonly planConflicts = new MirroredCounter(
    this.registry,
    'statelog_write_plan_conflicts_total',
    'Planned write groups refused because a key they read changed meanwhile (PostgreSQL: another node wrote it); each is planned again, under the lock after a few tries',
  );

  constructor(private readonly store: LogStore) {
    collectDefaultMetrics({ register: this.registry });
    for (const name of DROPPED_DEFAULTS) this.registry.removeSingleMetric(name);
    for (const kind of STREAM_KINDS) this.streams.set({ kind }, 0);
    new Gauge({
      name: 'statelog_build_info',
      help: 'Always 1; the labels name the running statelog version and Node.js version',
      labelNames: ['version', 'node_version'] as const,
      registers: [this.registry],
    }).set({ version: packageVersion(), node_version: process.version }, 1);
  }

  /** Per consumer (and its scoped token's name, '' for none); set afresh at each scrape. */
  private consumerGauge(name: string, help: string): Gauge<'consumer' | 'owner'> {
    return new Gauge({ name, help, labelNames: ['consumer', 'owner'] as const, registers: [this.logRegistry] });
  }

  private gauge(name: string, help: string, registry = this.registry): Gauge {
    return new Gauge({ name, help, registers: [registry] });
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  /** `route` is the matched pattern, undefined when nothing matched; `request` is the one given to openStream. */
  observeRequest(method: string, route: string | undefined, status: number, elapsedMs: number, request?: object, token?: string): void {
    if (token !== undefined) this.tokenRequests.set(token, (this.tokenRequests.get(token) ?? 0) + 1);
    const id = `${method} ${route ?? UNMATCHED_ROUTE} ${status}`;
    let series = this.requestSeries.get(id);
    if (!series) {
      const labels = { method, route: route ?? UNMATCHED_ROUTE, status: String(status) };
      series = { labels, count: 0, buckets: new Array<number>(REQUEST_DURATION_BUCKETS.length + 1).fill(0), timed: 0, sumSeconds: 0 };
      this.requestSeries.set(id, series);
    }
    series.count += 1;
    if (request && this.streamed.has(request)) return;
    const seconds = elapsedMs / 1000;
    let bucket = 0;
    while (bucket < REQUEST_DURATION_BUCKETS.length && seconds > REQUEST_DURATION_BUCKETS[bucket]!) bucket++;
    series.buckets[bucket]! += 1;
    series.timed += 1;
    series.sumSeconds += seconds;
  }

  reloadFailed(): void {
    this.reloadFailures.inc();
  }

  recordsWritten(count: number): void {
    this.written.inc(count);
  }

  snapshotRead(): void {
    this.snapshotReads.inc();
  }

  outageError(cause: string): void {
    this.outageErrors.inc({ cause });
  }

  rewound(): void {
    this.rewinds.inc();
  }

  /** A page of changes read for a reader: from the tail window, or from the store. */
  feedRead(from: 'window' | 'store'): void {
    this.feedReads.inc({ from });
  }

  sharedPagesBytes(bytes: number): void {
    this.sharedPagesKept.set(bytes);
  }

  sharedPageEvicted(): void {
    this.sharedPagesEvicted.inc();
  }

  /** A snapshot answered: from its own read, from a shared one, or not at all (304). */
  snapshotServed(from: 'read' | 'shared' | 'not_modified'): void {
    this.snapshotsServed.inc({ from });
  }

  groupCommitted(elapsedMs: number): void {
    this.groupCommits.observe(elapsedMs / 1000);
  }

  /** Counts an answer as open (not timed as a request); the returned function ends it, once, however it ends. */
  openStream(kind: StreamKind, request?: object): () => void {
    this.streams.inc({ kind });
    if (request) this.streamed.add(request);
    const started = performance.now();
    let open = true;
    return () => {
      if (!open) return;
      open = false;
      this.streams.dec({ kind });
      this.streamDurations.observe({ kind }, (performance.now() - started) / 1000);
    };
  }

  watchConsumerHolds(released: () => number): void {
    this.consumerHolds = released;
  }

  watchCompaction(source: () => CompactionStats): void {
    this.compaction = source;
  }

  private async setConsumers(): Promise<void> {
    const { rows, position } = await this.store.consumers.list(null);
    const now = Date.now();
    const m = this.consumerMetrics;
    for (const gauge of [m.lag, m.age, m.holding]) gauge.reset();
    for (const row of rows) {
      const view = viewOf(row, position, false);
      const labels = { consumer: row.name, owner: row.owner };
      m.lag.set(labels, view.lag);
      m.age.set(labels, Math.max(0, now - row.committedAt) / 1000);
      m.holding.set(labels, Number(row.hold));
    }
  }

  async exposition(): Promise<string> {
    let counters: StoreCounters | null = null;
    try {
      counters = await this.store.counters();
    } catch (err) {
      const kind = storeErrorKind(err);
      if (kind === null || kind === 'corrupt') throw err;
    }
    this.databaseUp.set(counters ? 1 : 0);
    if (counters) {
      this.log.head.set(counters.head);
      this.log.horizon.set(counters.horizon);
      this.log.records.set(counters.records);
      this.log.liveKeys.set(counters.liveKeys);
      this.log.expiredKeys.set(counters.expiredKeys);
      this.log.tombstones.set(counters.tombstones);
      this.log.dirtyRatio.set(dirtyRatio(counters));
      this.log.dbBytes.set(counters.dbBytes);
      await this.setConsumers();
    }
    this.consumerMetrics.releases.set(this.consumerHolds());

    const stats = this.compaction();
    const m = this.compactionMetrics;
    m.runs.set(stats.runs);
    m.failures.set(stats.failures);
    m.removed.set(stats.removed);
    m.tombstonesRemoved.set(stats.tombstonesRemoved);
    m.totalDuration.set(stats.totalDurationMs / 1000);
    m.lastDuration.set(stats.lastDurationMs / 1000);
    m.lastSuccess.set(stats.lastSuccessMs === null ? 0 : stats.lastSuccessMs / 1000);
    this.planConflicts.set(this.store.planConflicts ?? 0);
    const text = await this.registry.metrics();
    return counters ? text + (await this.logRegistry.metrics()) : text;
  }
}
