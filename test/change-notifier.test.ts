// The waits behind long polls and change streams: each ends on the first of a publish,
// its deadline, or its signal, and leaves nothing registered behind it.
import { describe, expect, it } from 'vitest';
import { ChangeNotifier, RepeatedWaiter } from '../src/feed/change-notifier.js';

const FAR = () => Date.now() + 60_000;

describe('RepeatedWaiter', () => {
  it('is woken by each publish in turn, and is registered only while it waits', async () => {
    const notifier = new ChangeNotifier();
    const waiter = new RepeatedWaiter(notifier, new AbortController().signal);
    const deadline = FAR();
    for (let head = 1; head <= 3; head++) {
      const woken = waiter.wait(deadline);
      expect(notifier.waiting).toBe(1);
      notifier.publish(head);
      expect(await woken).toBe(true);
      expect([notifier.waiting, notifier.head]).toEqual([0, head]);
    }
    waiter.close();
  });

  it('resolves false at its deadline, and a later wait with a new deadline times out again', async () => {
    const notifier = new ChangeNotifier();
    const waiter = new RepeatedWaiter(notifier, new AbortController().signal);
    const started = Date.now();
    expect(await waiter.wait(Date.now() + 30)).toBe(false);
    expect(Date.now() - started).toBeGreaterThanOrEqual(25);
    expect(notifier.waiting).toBe(0);
    expect(await waiter.wait(Date.now() + 30)).toBe(false);
    // A publish after the timeout wakes nothing that is gone.
    notifier.publish(1);
    waiter.close();
  });

  it('keeps the same deadline across wake-ups: the timer still fires at it', async () => {
    const notifier = new ChangeNotifier();
    const waiter = new RepeatedWaiter(notifier, new AbortController().signal);
    const deadline = Date.now() + 60;
    const first = waiter.wait(deadline);
    notifier.publish(1);
    expect(await first).toBe(true);
    expect(await waiter.wait(deadline)).toBe(false);
    expect(Date.now()).toBeGreaterThanOrEqual(deadline - 5);
    waiter.close();
  });

  it('resolves false when the signal aborts, at once and for every later wait', async () => {
    const notifier = new ChangeNotifier();
    const controller = new AbortController();
    const waiter = new RepeatedWaiter(notifier, controller.signal);
    const woken = waiter.wait(FAR());
    controller.abort();
    expect(await woken).toBe(false);
    expect(notifier.waiting).toBe(0);
    expect(await waiter.wait(FAR())).toBe(false);
    waiter.close();
  });

  it('close() ends a wait in progress and unregisters it', async () => {
    const notifier = new ChangeNotifier();
    const waiter = new RepeatedWaiter(notifier, new AbortController().signal);
    const woken = waiter.wait(FAR());
    waiter.close();
    expect(await woken).toBe(false);
    expect(notifier.waiting).toBe(0);
  });
});
