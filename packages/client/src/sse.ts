// Reads a text/event-stream body as an async sequence of events. fetch-based, so it
// can send an Authorization header (the browser's EventSource cannot).
import { createParser, type EventSourceMessage } from 'eventsource-parser';

export interface SseEvent {
  id: string | undefined;
  event: string;
  data: string;
}

export async function* readEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<SseEvent> {
  const ready: SseEvent[] = [];
  const parser = createParser({
    onEvent: (message: EventSourceMessage) =>
      ready.push({ id: message.id, event: message.event ?? 'message', data: message.data }),
  });
  const decoder = new TextDecoder();
  for await (const chunk of body) {
    parser.feed(decoder.decode(chunk, { stream: true }));
    while (ready.length > 0) yield ready.shift()!;
  }
}
