// The worker threads run TypeScript modules: from dist/ the compiled module, from the sources (a thread
// has no loader: half a second to start one) the text of the entry function.
import { createRequire } from 'node:module';
import { isMainThread, Worker, workerData, type WorkerOptions } from 'node:worker_threads';

/** A thread's entry: self-contained, it reaches modules only through `require`. */
export type ThreadMain = (require: NodeJS.Require) => void;

/** Starts `main` in a thread: the module at `url` when it is compiled JavaScript, else the function's text. */
export function startThread(url: URL, main: ThreadMain, options: WorkerOptions & { workerData: object }): Worker {
  const data = { ...options.workerData, thread: main.name };
  if (url.pathname.endsWith('.js')) return new Worker(url, { ...options, workerData: data });
  // tsx compiles with esbuild's keepNames, which wraps functions in __name().
  return new Worker(`var __name = (target) => target; (${main.toString()})(require);`, { ...options, workerData: data, eval: true });
}

/** Runs `main` when this module is the thread that startThread started for it. */
export function runIfThread(main: ThreadMain, moduleUrl: string): void {
  if (!isMainThread && (workerData as { thread?: unknown } | null)?.thread === main.name) main(createRequire(moduleUrl));
}
