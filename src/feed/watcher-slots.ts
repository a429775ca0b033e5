// At most STATELOG_MAX_WATCHERS long polls and change streams wait at once: each holds
// a connection, a wake-up on every commit and a read of the log after it.
import { Slots } from './slots.js';

export class WatcherSlots extends Slots {
  constructor(max: number) {
    super(max, 'long polls and change streams are already open');
  }
}
