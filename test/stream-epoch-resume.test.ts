// A stream opened with snapshot=true, as a browser EventSource opens it, reconnects by repeating
// its URL with Last-Event-ID: after a restore into a new epoch its offset means nothing, and it
// gets a reset, never a silent resume. A real server process, restored with `restore --db`.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { TEST_STORE } from './support/helpers.js';
import { childServers, type UrlServer } from './support/child-server.js';
import { cli } from './support/cli.js';
import { SseClient } from './support/stream-clients.js';

const servers = childServers({ STATELOG_SYNC: 'normal' });

async function write(url: string, keys: string[]): Promise<void> {
  const res = await fetch(`${url}/v1/records`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ records: keys.map((key) => ({ key, value: key })) }),
  });
  expect(res.status).toBe(200);
}

describe.skipIf(TEST_STORE === 'postgres')('a snapshot=true stream resumed across a restore', () => {
  it('gets a reset (epoch_changed) instead of the new epoch\'s records after its offset', async () => {
    let server: UrlServer = await servers.start();
    await write(server.url, ['a', 'b', 'c']);
    const backup = join(servers.dir, 'backup.db');
    expect((await cli(['backup', '--db', join(servers.dir, 'statelog.db'), backup])).code).toBe(0);

    const first = await SseClient.connect(`${server.url}/v1/changes/stream?snapshot=true`);
    await first.until((events) => events.some((e) => e.event === 'snapshot-end'));
    const lastId = first.named('snapshot-end')[0]!.id!;
    const oldEpoch = JSON.parse(first.named('snapshot-end')[0]!.data).epoch as string;
    first.close();
    expect(lastId).toBe('3');

    // The same URL, the same Last-Event-ID, in the same epoch: how it resumes is the server's
    // choice; across a restore it must not resume.
    await server.stop('SIGTERM');
    const restore = await cli(['restore', '--db', join(servers.dir, 'statelog.db'), backup]);
    expect(restore.code, restore.stderr).toBe(0);
    server = await servers.start();
    await write(server.url, ['d']);

    const resumed = await SseClient.connect(`${server.url}/v1/changes/stream?snapshot=true`, { 'last-event-id': lastId });
    await resumed.until((events) => events.some((e) => e.event === 'reset' || e.event === 'record'));
    const reset = resumed.named('reset')[0];
    expect(resumed.records()).toEqual([]);
    expect(reset).toBeDefined();
    const body = JSON.parse(reset!.data) as { error: { code: string; epoch: string } };
    expect(body.error.code).toBe('epoch_changed');
    expect(body.error.epoch).not.toBe(oldEpoch);
    await resumed.ended;
    await server.stop('SIGTERM');
  });
});
