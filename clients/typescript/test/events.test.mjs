// A run's events against a real server: to run_end, resumed after a sequence,
// across connections a proxy cuts mid-stream, aborted, and closed by a break.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { AgentRunner } from "../dist/index.js";
import { startStreamingModel } from "./support/model.mjs";
import { startProxy } from "./support/proxy.mjs";
import { startServer } from "./support/server.mjs";
import { collect, listThenDone, oneTo, pausingRun, sequences, slowRun, until } from "./support/runs.mjs";

let model;
let server;
let runner;

before(async () => {
  model = await startStreamingModel(["Hel", "lo", " world"]);
  // Keep-alive comments every 20 ms on an idle stream, so that a pause has some.
  server = await startServer({ server: ["sse_keep_alive_ms = 20"], config: model.profile("streaming") });
  runner = new AgentRunner({ baseUrl: server.baseUrl });
});

after(async () => {
  await server?.stop();
  await model?.close();
});

test("events follows a run from its first event to run_end", async () => {
  const run = await runner.createRun(listThenDone());
  const events = await collect(runner.events(run.id));
  assert.deepEqual(sequences(events), oneTo(events.length), "contiguous from 1");
  assert.equal(events[0].type, "run_start");
  const end = events.at(-1);
  assert.equal(end.type, "run_end");
  assert.equal(end.status, "completed");
  assert.equal(end.answer, "Done");
  assert.deepEqual(end.usage, { input_tokens: 12, output_tokens: 3, model_calls_with_usage: 1, cached_input_tokens: 0, cache_write_tokens: 0, cost_usd: null });
  assert.ok(events.every((event) => event.run_id === run.id));
  const types = events.map((event) => event.type);
  for (const type of ["message", "model_start", "model_end", "tool_start", "tool_end"]) {
    assert.ok(types.includes(type), `has ${type}`);
  }
});

test("events after a sequence starts past it; after the end there is nothing", async () => {
  const run = await runner.createRun(listThenDone(), { wait: true });
  const all = await collect(runner.events(run.id));
  const rest = await collect(runner.events(run.id, { after: 3 }));
  assert.deepEqual(rest, all.slice(3));
  // The server answers 204 there: the stream ends at once.
  assert.deepEqual(await collect(runner.events(run.id, { after: all.length })), []);
});

test("a stream cut mid-run is resumed with Last-Event-ID, each event once", async () => {
  const proxy = await startProxy(server.port, { cutAfterIds: 3, cuts: 2 });
  try {
    const run = await runner.createRun(slowRun(7, 400));
    const through = new AgentRunner({ baseUrl: proxy.url });
    const events = await collect(through.events(run.id));

    assert.deepEqual(sequences(events), oneTo(events.length), "every event once, in order");
    assert.equal(events.at(-1).type, "run_end");
    assert.equal(events.at(-1).status, "completed");
    assert.equal(events.filter((event) => event.type === "run_end").length, 1);

    const streams = proxy.connections.filter((connection) => connection.request.includes("/events "));
    assert.equal(streams.length, 3, "two cuts, two resumptions");
    assert.deepEqual(
      streams.map((connection) => connection.cut),
      [true, true, false],
    );
    // Each cut came right after the bytes of a connection's third `id:`
    // line: that event arrived incomplete, so the resumption starts after
    // the one before it.
    assert.doesNotMatch(streams[0].request, /last-event-id/i);
    assert.match(streams[1].request, /\r\nlast-event-id: 2\r\n/i);
    assert.match(streams[2].request, /\r\nlast-event-id: 4\r\n/i);
    // The first resumption came while the run was still going.
    const { finished_at: finishedAt } = await runner.getRun(run.id);
    assert.ok(streams[1].openedAt < Date.parse(finishedAt), "resumed mid-run");
  } finally {
    await proxy.close();
  }
});

test("model_delta events are yielded once, and move no resume position", async () => {
  // Cut in the middle of model_end (4), once the deltas after model_start (3) have passed.
  const proxy = await startProxy(server.port, { cutAfterIds: 4, cuts: 1 });
  try {
    const run = await runner.createRun({ prompt: "Say hello", model: "streaming", tools: [] });
    const through = new AgentRunner({ baseUrl: proxy.url });
    const events = [];
    for await (const event of through.events(run.id)) {
      events.push(event);
      if (event.type === "model_start") model.release();
    }
    const deltas = events.filter((event) => event.type === "model_delta");
    assert.deepEqual(
      deltas.map((delta) => delta.text),
      ["Hel", "lo", " world"],
    );
    assert.ok(deltas.every((delta) => delta.sequence === undefined && delta.run_id === run.id));
    assert.deepEqual(sequences(events), oneTo(events.length - deltas.length));
    const types = events.map((event) => event.type);
    assert.deepEqual(types.slice(2, 7), ["model_start", "model_delta", "model_delta", "model_delta", "model_end"]);
    assert.equal(events.at(-1).type, "run_end");
    assert.equal(events.at(-1).answer, "Hello world");

    const streams = proxy.connections.filter((connection) => connection.request.includes("/events "));
    assert.equal(streams.length, 2);
    assert.match(streams[1].request, /\r\nlast-event-id: 3\r\n/i);
  } finally {
    await proxy.close();
  }
});

test("a stream that keeps dropping before any event gives up with connection_lost", async () => {
  const proxy = await startProxy(server.port, { cutAfterIds: 1, cuts: Infinity });
  try {
    const run = await runner.createRun(listThenDone(), { wait: true });
    const through = new AgentRunner({ baseUrl: proxy.url });
    const error = await collect(through.events(run.id, { maxReconnects: 1 })).then(
      () => assert.fail("expected connection_lost"),
      (error) => error,
    );
    assert.equal(error.code, "connection_lost");
    assert.match(error.message, new RegExp(`event stream of run ${run.id} dropped .* 1 attempt`));
    assert.equal(proxy.connections.filter((connection) => connection.cut).length, 2);
  } finally {
    await proxy.close();
  }
});

test("answering from the loop: the stream waits through each pause, then goes on", async () => {
  const proxy = await startProxy(server.port);
  try {
    const run = await runner.createRun(pausingRun());
    const through = new AgentRunner({ baseUrl: proxy.url });
    const events = [];
    for await (const event of through.events(run.id)) {
      events.push(event);
      if (event.type !== "actions_required") continue;
      const [action] = event.actions;
      // Answered once the idle stream has carried a keep-alive comment.
      const stream = proxy.connections.find((connection) => connection.request.includes("/events "));
      const keepAlives = () => (stream.response.match(/^:.*$/gm) ?? []).length;
      const comments = keepAlives();
      await until(proxy.changes, "response", () => keepAlives() > comments);
      if (action.kind === "client_tool") await runner.submitOutput(run.id, action.call_id, { status: "shipped" });
      else await runner.approve(run.id, action.call_id);
    }
    assert.deepEqual(sequences(events), oneTo(events.length));
    assert.deepEqual(
      events.filter((event) => event.type === "actions_required").map((event) => event.actions[0].call_id),
      ["1", "2"],
    );
    assert.equal(events.at(-1).status, "completed");
    assert.equal(events.at(-1).answer, "Noted.");
    assert.equal(proxy.connections.filter((connection) => connection.request.includes("/events ")).length, 1);
  } finally {
    await proxy.close();
  }
});

test("a signal stops a stream that waits", async () => {
  const run = await runner.createRun(pausingRun());
  const controller = new AbortController();
  const seen = [];
  await assert.rejects(
    (async () => {
      for await (const event of runner.events(run.id, { signal: controller.signal })) {
        seen.push(event.type);
        if (event.type === "actions_required") controller.abort();
      }
    })(),
    { name: "AbortError" },
  );
  assert.equal(seen.at(-1), "actions_required");
  await runner.cancel(run.id);
});

test("breaking out of the loop closes the connection", async () => {
  const proxy = await startProxy(server.port);
  try {
    const run = await runner.createRun(pausingRun());
    const through = new AgentRunner({ baseUrl: proxy.url });
    for await (const event of through.events(run.id)) {
      if (event.type === "actions_required") break;
    }
    const stream = proxy.connections.find((connection) => connection.request.includes("/events "));
    await until(proxy.changes, "closed", () => stream.closed);
    await runner.cancel(run.id);
  } finally {
    await proxy.close();
  }
});
