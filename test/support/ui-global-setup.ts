// vitest globalSetup of the tiers that serve the dashboard (test/tiers.ts): builds the dashboard into dist/ui once,
// before any test file runs. The servers of test/ui serve that build; building in each
// file instead would have parallel files delete it under each other.
import { buildUi } from '../../scripts/build-ui.js';

export default async function setup(): Promise<void> {
  await buildUi();
}
