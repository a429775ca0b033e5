// Reads a text/event-stream body as an async sequence of events. fetch-based, so it
// can send an Authorization header (the browser's EventSource cannot).
import { createParser, type EventSourceMessage } from 'eventsource-parser';

export interface SseEvent {
  id: string | undefined;
  /** The event's name; `comment` for a comment line (data: its text). */
  event: string;
  data: string;
  /** The last event of what one read of the body brought. */
  last: boolean;
}

export async function* readEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<SseEvent> {
  const ready: SseEvent[] = [];
  const parser = createParser({
    onEvent: (message: EventSourceMessage) =>
      ready.push({ id: message.id, event: message.event ?? 'message', data: message.data, last: false }),
    onComment: (comment: string) => ready.push({ id: undefined, event: 'comment', data: comment.trim(), last: false }),
  });
  const decoder = new TextDecoder();
  for await (const chunk of body) {
    parser.feed(decoder.decode(chunk, { stream: true }));
    if (ready.length > 0) ready[ready.length - 1]!.last = true;
    while (ready.length > 0) yield ready.shift()!;
  }
}
