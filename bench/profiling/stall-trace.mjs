// A preload for the server process that writes a timeline of what can hold a request up:
// event-loop stalls, slow fdatasyncs of the WAL (on the loop and on the thread pool),
// slow SQLite transactions and pragmas, and slow requests. Each line is
// `<epoch ms> <kind> <ms> [detail]`; bench/profiling/stall-report.mjs sums a timeline.
//   NODE_OPTIONS="--import ./bench/profiling/stall-trace.mjs" STALL_TRACE_DIR=/tmp/trace \
//     BENCH_RECORDS=3000000 BENCH_KEYS=30000 BENCH_RUNS=1 npx tsx bench/run.ts --only compact --full --no-docs
// NODE_OPTIONS reaches the bench runner too: only a process whose entry is a server traces.
import diagnostics from 'node:diagnostics_channel';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import { createRequire, syncBuiltinESMExports } from 'node:module';
import { tmpdir } from 'node:os';
import { performance } from 'node:perf_hooks';

if (/server\.(ts|js)$/.test(process.argv[1] ?? '')) trace();

function trace() {
  const dir = process.env.STALL_TRACE_DIR ?? tmpdir();
  const out = fs.openSync(`${dir}/stall-trace-${process.pid}.log`, 'a');
  const emit = (kind, ms, detail = '') => fs.writeSync(out, `${Date.now()} ${kind} ${ms.toFixed(2)} ${detail}\n`);
  /** Emits `kind` if more than `overMs` have passed since `started`. */
  const since = (kind, overMs, started, detail) => {
    const ms = performance.now() - started;
    if (ms > overMs) emit(kind, ms, detail?.());
  };
  /** Calls `work`, and emits `kind` if it took longer than `overMs`. */
  const timed = (kind, overMs, work, detail) => {
    const started = performance.now();
    try {
      return work();
    } finally {
      since(kind, overMs, started, detail);
    }
  };

  // The store imports fdatasyncSync by name: the ESM view of node:fs follows once synced.
  const fdatasyncSync = fs.fdatasyncSync;
  fs.fdatasyncSync = (fd) => timed('loop-fdatasync', 3, () => fdatasyncSync(fd));
  const open = fsp.open;
  let handlesPatched = false;
  fsp.open = async (...args) => {
    const handle = await open(...args);
    if (!handlesPatched) {
      handlesPatched = true;
      const proto = Object.getPrototypeOf(handle);
      const datasync = proto.datasync;
      proto.datasync = async function () {
        const started = performance.now();
        try {
          return await datasync.call(this);
        } finally {
          since('pool-fdatasync', 5, started);
        }
      };
    }
    return handle;
  };
  syncBuiltinESMExports();

  const load = createRequire(`${process.cwd()}/`);
  const Database = load('better-sqlite3');
  const pragma = Database.prototype.pragma;
  Database.prototype.pragma = function (source, options) {
    return timed('pragma', 2, () => pragma.call(this, source, options), () => JSON.stringify(source));
  };
  const transaction = Database.prototype.transaction;
  Database.prototype.transaction = function (fn) {
    const wrapped = transaction.call(this, fn);
    // The write path's transaction takes arguments; a compaction step's takes none.
    const kind = fn.length > 0 ? 'write-tx' : 'other-tx';
    return function (...args) {
      return timed(kind, 4, () => wrapped.apply(this, args));
    };
  };

  let last = performance.now();
  setInterval(() => {
    const now = performance.now();
    const late = now - last - 1;
    if (late > 8) emit('stall', late);
    last = now;
  }, 1).unref();

  const started = new WeakMap();
  diagnostics.subscribe('http.server.request.start', ({ request }) => started.set(request, performance.now()));
  diagnostics.subscribe('http.server.response.finish', ({ request }) => {
    const at = started.get(request);
    if (at !== undefined) since('slow-request', 15, at, () => request.method);
  });
}
