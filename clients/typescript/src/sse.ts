/**
 * A parser of `text/event-stream` (the WHATWG "Server-sent events"
 * interpretation rules): lines end with CRLF, LF or CR; a line starting with
 * `:` is a comment; `field: value` lines build an event that a blank line
 * dispatches; an event without `data` is not dispatched; an incomplete event
 * at the end of the stream is dropped.
 */

/** One dispatched event. */
export interface SseMessage {
  /** The `id:` field of this event, if it had one (unlike EventSource's `lastEventId`, not inherited). */
  id: string | undefined;
  /** The `event:` field, `message` when it had none. */
  event: string;
  /** The `data:` lines, joined with `\n`. */
  data: string;
}

/** Feeds decoded text in, gets dispatched events out. */
export class SseParser {
  /** The reconnection time the last valid `retry:` field set, in milliseconds. */
  retry: number | undefined;

  private pending = "";
  private started = false;
  private afterCR = false;
  private id: string | undefined;
  private event = "";
  private data: string[] = [];

  /** Parses `text` (any slice of the stream) and returns the events it completed. */
  feed(text: string): SseMessage[] {
    let input = this.pending + text;
    if (!this.started && input.length > 0) {
      this.started = true;
      if (input.startsWith("\uFEFF")) input = input.slice(1);
    }
    // A CR that ended the last slice and the LF that starts this one are one line end.
    if (this.afterCR && input.startsWith("\n")) input = input.slice(1);
    this.afterCR = false;
    const messages: SseMessage[] = [];
    let start = 0;
    for (let end = lineEnd(input, start); end !== -1; end = lineEnd(input, start)) {
      const message = this.line(input.slice(start, end));
      if (message !== undefined) messages.push(message);
      start = input.startsWith("\r\n", end) ? end + 2 : end + 1;
      this.afterCR = input[end] === "\r" && end + 1 === input.length;
    }
    this.pending = input.slice(start);
    return messages;
  }

  private line(line: string): SseMessage | undefined {
    if (line === "") return this.dispatch();
    if (line.startsWith(":")) return undefined;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (field) {
      case "event":
        this.event = value;
        break;
      case "data":
        this.data.push(value);
        break;
      case "id":
        if (!value.includes("\0")) this.id = value;
        break;
      case "retry":
        if (/^[0-9]+$/.test(value)) this.retry = Number(value);
        break;
      default:
        // Unknown fields are ignored.
        break;
    }
    return undefined;
  }

  private dispatch(): SseMessage | undefined {
    const message =
      this.data.length === 0
        ? undefined
        : { id: this.id, event: this.event || "message", data: this.data.join("\n") };
    this.id = undefined;
    this.event = "";
    this.data = [];
    return message;
  }
}

/** The index of the next CR or LF of `text` from `start`, or -1. */
function lineEnd(text: string, start: number): number {
  for (let index = start; index < text.length; index += 1) {
    const char = text[index];
    if (char === "\n" || char === "\r") return index;
  }
  return -1;
}

/**
 * The events of an event-stream `body`, as they arrive, parsed by `parser`
 * (a new one per body; it keeps the last `retry:`). Ends with the body;
 * throws what reading the body throws.
 * Stopping the iteration early cancels the body (and so the connection).
 */
export async function* readEventStream(
  body: ReadableStream<Uint8Array>,
  parser: SseParser,
): AsyncGenerator<SseMessage, void, undefined> {
  const reader = body.getReader();
  const decoder = new TextDecoder("utf-8");
  let done = false;
  try {
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done) {
        // Whatever is left unfinished is an incomplete event: dropped.
        done = true;
        return;
      }
      yield* parser.feed(decoder.decode(chunk.value, { stream: true }));
    }
  } finally {
    if (!done) await reader.cancel().catch(() => undefined);
  }
}
