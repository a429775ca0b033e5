// The durable head's barriers: one at a time, shared by every wait that began before it, and
// never taken as covering a commit made after its statement began.
import { describe, expect, it } from 'vitest';
import { DurableHead, NotDurable, type Barriers } from '../src/store/postgres/durable-head.js';

/** Barriers that the test answers one by one, with the head each one saw, and the heads announced to other nodes. */
function controlledBarriers() {
  const calls: { answer(head: number): void; fail(err: Error): void }[] = [];
  const announced: number[] = [];
  const barrier: Barriers = {
    run: () =>
      new Promise<number>((resolve, reject) => {
        calls.push({ answer: resolve, fail: reject });
      }),
    announce: (head) => announced.push(head),
  };
  return { calls, announced, barrier };
}

const settled = async <T>(promise: Promise<T>) => {
  let state = 'pending';
  promise.then(
    () => (state = 'resolved'),
    () => (state = 'rejected'),
  );
  await new Promise((resolve) => setImmediate(resolve));
  return state;
};

describe('the durable head', () => {
  it('answers a wait once a barrier saw its offset, and those who came during a barrier share the next', async () => {
    const { calls, barrier } = controlledBarriers();
    const durable = new DurableHead(barrier);
    const first = durable.cover(3);
    expect(calls).toHaveLength(1);
    const second = durable.cover(5);
    const third = durable.cover(6);
    // One barrier at a time.
    expect(calls).toHaveLength(1);
    calls[0]!.answer(4);
    expect(await settled(first)).toBe('resolved');
    expect(await settled(second)).toBe('pending');
    // The two left share one barrier.
    expect(calls).toHaveLength(2);
    calls[1]!.answer(6);
    expect(await settled(second)).toBe('resolved');
    expect(await settled(third)).toBe('resolved');
    expect(durable.value).toBe(6);
    // Covered already: no barrier.
    await durable.cover(6);
    expect(calls).toHaveLength(2);
  });

  it('a failed barrier fails the waits it was for; a wait that came during it gets the next', async () => {
    const { calls, barrier } = controlledBarriers();
    const durable = new DurableHead(barrier);
    const before = durable.cover(2);
    const during = (async () => {
      await new Promise((resolve) => setImmediate(resolve));
      return durable.cover(3);
    })();
    await new Promise((resolve) => setImmediate(resolve));
    calls[0]!.fail(new Error('the standby did not confirm'));
    await expect(before).rejects.toThrow('the standby did not confirm');
    expect(calls).toHaveLength(2);
    calls[1]!.answer(3);
    await expect(during).resolves.toBeUndefined();
  });

  it("another node's durable head answers waits at once; a reset makes the next wait run a barrier", async () => {
    const { calls, barrier } = controlledBarriers();
    const durable = new DurableHead(barrier);
    const waiting = durable.cover(10);
    durable.learn(12);
    expect(await settled(waiting)).toBe('resolved');
    durable.reset();
    expect(durable.value).toBe(0);
    const again = durable.cover(1);
    // The barrier still under way was started before the reset, on what may be another
    // database: the wait that came after it gets the next one.
    calls[0]!.answer(12);
    expect(await settled(again)).toBe('pending');
    expect(calls).toHaveLength(2);
    calls[1]!.answer(1);
    expect(await settled(again)).toBe('resolved');
  });

  it('a wait gives up after its time, and is forgotten', async () => {
    const { calls, barrier } = controlledBarriers();
    const durable = new DurableHead(barrier);
    const err = await durable.cover(1, 20).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NotDurable);
    expect((err as Error).message).toMatch(/not durable up to offset 1 within 20 ms/);
    calls[0]!.answer(1);
    await new Promise((resolve) => setImmediate(resolve));
    expect(durable.value).toBe(1);
  });

  it('neither keeps nor tells the head of a barrier that a reset overtook: the database may be another one now', async () => {
    const { calls, announced, barrier } = controlledBarriers();
    const durable = new DurableHead(barrier);
    const first = durable.cover(3);
    const second = durable.cover(5);
    // A connection broke while the barrier ran: a failover may have happened.
    durable.reset();
    calls[0]!.answer(4);
    expect(await settled(first)).toBe('resolved');
    expect(durable.value).toBe(0);
    // Nor told to the other nodes: only the next barrier's head, on whichever database answers now.
    expect(announced).toEqual([]);
    calls[1]!.answer(5);
    expect(await settled(second)).toBe('resolved');
    expect(durable.value).toBe(5);
    expect(announced).toEqual([5]);
  });

  it("tells other nodes each barrier's head once it is durable, apart from the barrier, and nothing of one that failed", async () => {
    const { calls, announced, barrier } = controlledBarriers();
    const durable = new DurableHead(barrier);
    const first = durable.cover(3);
    const second = durable.cover(5);
    // Not before the barrier is answered: until then nothing is durable.
    expect(announced).toEqual([]);
    calls[0]!.answer(4);
    expect(await settled(first)).toBe('resolved');
    expect(announced).toEqual([4]);
    calls[1]!.answer(5);
    expect(await settled(second)).toBe('resolved');
    expect(announced).toEqual([4, 5]);
    // A wait already covered runs no barrier and announces nothing again.
    await durable.cover(5);
    expect(calls).toHaveLength(2);
    expect(announced).toEqual([4, 5]);
    const third = durable.cover(7);
    const fourth = durable.cover(9);
    calls[2]!.answer(7);
    await settled(third);
    calls[3]!.fail(new Error('connection terminated'));
    await expect(fourth).rejects.toThrow('connection terminated');
    expect(announced).toEqual([4, 5, 7]);
  });

  it('with no barrier (commits acknowledged as the server makes them) everything is durable', async () => {
    const durable = new DurableHead(undefined);
    await durable.cover(Number.MAX_SAFE_INTEGER - 1);
    expect(durable.value).toBe(Number.MAX_SAFE_INTEGER);
  });
});
