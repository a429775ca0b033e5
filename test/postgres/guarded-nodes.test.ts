// Guarded increments racing on two nodes of one database stay exact: no node's plan may
// pass a bound that another node's commit has already reached.
import { afterEach, expect, it } from 'vitest';
import { fixture, http, NO_SHEDDING, type Fixture } from './fixtures.js';

let f: Fixture | undefined;
afterEach(async () => {
  await f?.cleanup();
  f = undefined;
});

it('50 concurrent decrements of a balance of 20 with min 0, across two nodes, leave exactly 0', async () => {
  f = await fixture();
  const nodes = await Promise.all([f.spawn(NO_SHEDDING), f.spawn(NO_SHEDDING)]);
  expect((await http(nodes[0]!.url, 'PUT', '/v1/keys/balance', { value: 20 })).status).toBe(200);
  const answers = await Promise.all(
    Array.from({ length: 50 }, (_, i) =>
      http(nodes[i % 2]!.url, 'POST', '/v1/records', { records: [{ key: 'balance', op: 'incr', by: -1, min: 0 }] }),
    ),
  );
  const accepted = answers.filter((answer) => answer.status === 200);
  const refused = answers.filter((answer) => answer.status === 409);
  expect(accepted).toHaveLength(20);
  expect(refused).toHaveLength(30);
  for (const answer of refused) expect(answer.body.error).toMatchObject({ code: 'out_of_range', index: 0, value: expect.any(Number) });
  // Each accepted decrement saw a distinct balance: 19 down to 0.
  expect(accepted.map((answer) => answer.body.records[0].value).sort((x: number, y: number) => x - y)).toEqual(
    Array.from({ length: 20 }, (_, i) => i),
  );
  for (const node of nodes) expect((await http(node.url, 'GET', '/v1/keys/balance')).body.value).toBe(0);
});
