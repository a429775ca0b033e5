// A balance service: moves money between two accounts without losing or doubling an
// update, however many transfers run at once and however often they are retried.
//
//   STATELOG_URL=http://127.0.0.1:8080 npx tsx examples/balance-transfer.ts
//
// Each transfer reads both balances, then writes both in ONE batch, conditional on the
// offsets it read (ifOffset), together with a marker key for the transfer id (ifAbsent).
// A concurrent change makes the batch fail with 412 and the transfer starts over with
// fresh reads; a transfer that was already applied (its answer lost, then retried)
// finds its marker and stops. The client adds an Idempotency-Key to every write, so its
// own retries of one batch are answered from the server's memory, never applied twice.
import { StatelogClient, isStatelogError } from '@statelog/client';

interface Account {
  balance: number;
}

export type TransferResult = 'done' | 'already-done' | 'insufficient-funds';

export async function transfer(
  client: StatelogClient,
  transferId: string,
  from: string,
  to: string,
  amount: number,
): Promise<TransferResult> {
  const marker = `transfers/${transferId}`;
  for (;;) {
    const [source, target, done] = await Promise.all([
      client.get<Account>(`accounts/${from}`),
      client.get<Account>(`accounts/${to}`),
      client.get(marker),
    ]);
    if (done) return 'already-done';
    if (!source || source.value.balance < amount) return 'insufficient-funds';
    try {
      await client.batch([
        { key: marker, value: { from, to, amount }, ifAbsent: true },
        { key: `accounts/${from}`, value: { balance: source.value.balance - amount }, ifOffset: source.offset },
        target
          ? { key: `accounts/${to}`, value: { balance: target.value.balance + amount }, ifOffset: target.offset }
          : { key: `accounts/${to}`, value: { balance: amount }, ifAbsent: true },
      ]);
      return 'done';
    } catch (err) {
      // Someone else moved first: read again and retry.
      if (isStatelogError(err, 'precondition_failed')) continue;
      throw err;
    }
  }
}

async function main() {
  const client = new StatelogClient({ url: process.env.STATELOG_URL ?? 'http://127.0.0.1:8080', token: process.env.STATELOG_TOKEN });
  await client.put('accounts/alice', { balance: 100 });
  await client.put('accounts/bob', { balance: 0 });
  const run = Date.now().toString(36);
  // 25 transfers of 5 race each other; the last 5 find no funds left.
  const results = await Promise.all(Array.from({ length: 25 }, (_, i) => transfer(client, `${run}-${i}`, 'alice', 'bob', 5)));
  // Retrying a finished transfer changes nothing. (Which ones finished depends on the
  // race: transfer 0 may have been among those that found no funds.)
  const finished = results.indexOf('done');
  results.push(await transfer(client, `${run}-${finished}`, 'alice', 'bob', 5));
  const alice = (await client.get<Account>('accounts/alice'))!.value.balance;
  const bob = (await client.get<Account>('accounts/bob'))!.value.balance;
  const counts: Record<string, number> = {};
  for (const result of results) counts[result] = (counts[result] ?? 0) + 1;
  console.log(JSON.stringify({ transfers: counts, alice, bob, total: alice + bob }));
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
