// Durability: every write answered 200 survives a SIGKILL of the server the instant after.
import { describe, expect, it, vi } from 'vitest';
import { childServers } from './support/child-server.js';
import { expectAllThere, putValue, Writers } from './support/acked-writes.js';

const servers = childServers();

describe('crash safety', () => {
  it('keeps every acknowledged write after kill -9 under 8 concurrent writers', async () => {
    const server = await servers.start();
    const writers = new Writers(8, (w, i) => putValue(server.url, `w${w}/k${i}`, String(i)));
    // Killed mid-load once enough writes were answered (a busy machine takes longer).
    await vi.waitFor(() => expect(writers.acked.length).toBeGreaterThan(200), { timeout: 20_000, interval: 50 });
    await servers.kill(server);
    await writers.done;
    expect(writers.refused).toEqual([]);

    const restarted = await servers.start();
    await expectAllThere(restarted.url, writers.acked);
  }, 90_000);
});
