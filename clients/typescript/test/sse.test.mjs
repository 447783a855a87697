// The event-stream parser on the edge cases of the format, fed in slices
// as a network would cut them.
import assert from "node:assert/strict";
import { test } from "node:test";
import { SseParser } from "../dist/index.js";

/** Feeds `text` to a new parser in slices of `size` characters. */
function parse(text, size = text.length) {
  const parser = new SseParser();
  const messages = [];
  for (let start = 0; start < text.length; start += size) {
    messages.push(...parser.feed(text.slice(start, start + size)));
  }
  return { messages, retry: parser.retry };
}

test("LF, CRLF and CR line ends, in any slices", () => {
  for (const end of ["\n", "\r\n", "\r"]) {
    const text = ["id: 1", "event: run_start", 'data: {"a":1}', "", "id: 2", "data: x", "", ""].join(end);
    for (const size of [1, 2, 3, text.length]) {
      assert.deepEqual(
        parse(text, size).messages,
        [
          { id: "1", event: "run_start", data: '{"a":1}' },
          { id: "2", event: "message", data: "x" },
        ],
        `${JSON.stringify(end)} in slices of ${size}`,
      );
    }
  }
});

test("a CRLF at the end of a slice, then an LF, is two line ends", () => {
  const parser = new SseParser();
  assert.deepEqual(parser.feed("data: a\r\n"), []);
  assert.deepEqual(parser.feed("\n"), [{ id: undefined, event: "message", data: "a" }]);
  assert.deepEqual(parser.feed("data: b\r"), []);
  assert.deepEqual(parser.feed("\n\r"), [{ id: undefined, event: "message", data: "b" }]);
});

test("comments, multi-line data, retry, and fields without a space", () => {
  const text = ": keep-alive\n\nretry: 1000\nid:7\ndata:first\ndata: second\ndata\n: in between\nevent:x\n\n";
  const { messages, retry } = parse(text);
  assert.deepEqual(messages, [{ id: "7", event: "x", data: "first\nsecond\n" }]);
  assert.equal(retry, 1000);
});

test("an event without an id has none; one without data is not dispatched", () => {
  const text = "event: model_delta\ndata: {}\n\nid: 3\n\nretry: nope\n\n";
  const { messages, retry } = parse(text);
  assert.deepEqual(messages, [{ id: undefined, event: "model_delta", data: "{}" }]);
  assert.equal(retry, undefined);
});

test("an incomplete event is held back; a leading BOM is dropped", () => {
  const parser = new SseParser();
  assert.deepEqual(parser.feed("\uFEFFid: 1\ndata: a"), []);
  assert.deepEqual(parser.feed("b\n"), []);
  assert.deepEqual(parser.feed("\n"), [{ id: "1", event: "message", data: "ab" }]);
});
