// vitest globalSetup of every tier (test/tiers.ts): compiles the server and the command-line client
// (harness/build.ts) once before any file runs. The tests' child processes then start
// from that JavaScript, as in production, instead of compiling the TypeScript through tsx
// at each of the suite's many process starts, which cost more than a second of CPU each.
import { buildClient, buildServer } from '../../harness/build.js';

export default function setup(): void {
  buildClient();
  // Incremental, as `npm start` builds: a second project's setup finds nothing to do.
  buildServer();
}
