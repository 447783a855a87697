// Runs against a real server: create (with wait), get, list across pages,
// cancel, transcripts, and a run paused for a client tool and an approval.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { AgentRunner } from "../dist/index.js";
import { startServer } from "./support/server.mjs";
import { eventOf, listThenDone, pausingRun, slowRun } from "./support/runs.mjs";

let server;
let runner;

before(async () => {
  server = await startServer();
  runner = new AgentRunner({ baseUrl: server.baseUrl });
});

after(async () => {
  await server?.stop();
});

test("createRun with wait answers the completed run", async () => {
  const run = await runner.createRun(listThenDone(), { wait: true });
  assert.equal(run.status, "completed");
  assert.equal(run.answer, "Done");
  assert.equal(run.steps, 2);
  assert.equal(run.tool_calls, 1);
  assert.deepEqual(run.usage, { input_tokens: 12, output_tokens: 3, model_calls_with_usage: 1, cached_input_tokens: 0, cache_write_tokens: 0, cost_usd: null });
  assert.deepEqual(run.tools, ["list_dir"]);
  assert.ok(run.finished_at);
});

test("createRun without wait answers at once; getRun shows the run as it ended", async () => {
  const created = await runner.createRun(slowRun(1, 200));
  assert.ok(["queued", "running"].includes(created.status), created.status);
  await eventOf(runner, created.id, isEnd);
  const ended = await runner.getRun(created.id);
  assert.equal(ended.status, "completed");
  assert.equal(ended.id, created.id);
  assert.equal(ended.answer, "Done");
  assert.equal(ended.prompt, "Take your time");
});

test("an idempotency key answers the same run again", async () => {
  const key = `key-${Date.now()}`;
  const first = await runner.createRun(listThenDone(), { idempotencyKey: key });
  const second = await runner.createRun(listThenDone(), { idempotencyKey: key });
  assert.equal(second.id, first.id);
});

test("listRuns walks every page; listRunsPage answers one", async () => {
  // A conversation of three runs: its thread holds exactly those.
  const first = await runner.createRun(listThenDone("one"), { wait: true });
  const second = await runner.createRun({ ...listThenDone("two"), previous_run_id: first.id }, { wait: true });
  const third = await runner.createRun({ ...listThenDone("three"), previous_run_id: second.id }, { wait: true });
  assert.equal(third.thread_id, first.id);

  const ids = [];
  for await (const run of runner.listRuns({ threadId: first.id, limit: 1 })) ids.push(run.id);
  assert.deepEqual(ids, [third.id, second.id, first.id], "newest first, each once");

  const page = await runner.listRunsPage({ threadId: first.id, limit: 2 });
  assert.deepEqual(page.runs.map((run) => run.id), [third.id, second.id]);
  assert.ok(page.next_cursor);
  const last = await runner.listRunsPage({ threadId: first.id, limit: 2, cursor: page.next_cursor });
  assert.deepEqual(last.runs.map((run) => run.id), [first.id]);
  assert.equal(last.next_cursor, null);

  const completed = [];
  for await (const run of runner.listRuns({ status: "completed", threadId: first.id })) completed.push(run);
  assert.equal(completed.length, 3);
});

test("cancel ends a live run aborted, and may be repeated", async () => {
  const run = await runner.createRun(slowRun(5, 2_000));
  await eventOf(runner, run.id, (event) => event.type === "run_start");
  const accepted = await runner.cancel(run.id);
  assert.equal(accepted.id, run.id);
  assert.ok(["running", "aborted"].includes(accepted.status), accepted.status);
  await eventOf(runner, run.id, isEnd);
  const ended = await runner.getRun(run.id);
  assert.equal(ended.status, "aborted");
  assert.ok(ended.finished_at);
  const again = await runner.cancel(run.id);
  assert.equal(again.status, "aborted");
});

test("messages answers the transcript in order", async () => {
  const run = await runner.createRun(listThenDone("What is here?"), { wait: true });
  const messages = await runner.messages(run.id);
  assert.deepEqual(
    messages.map((message) => message.role),
    ["user", "assistant", "tool", "assistant"],
  );
  assert.deepEqual(messages[0], { role: "user", content: "What is here?" });
  assert.equal(messages[1].tool_calls[0].name, "list_dir");
  assert.equal(messages[2].call_id, "1");
  assert.equal(messages[2].is_error, false);
  assert.equal(messages[3].content, "Done");
});

test("a paused run: submit a client tool's output, then approve a write", async () => {
  const run = await runner.createRun(pausingRun());
  await eventOf(runner, run.id, pauseFor("1"));
  const paused = await runner.getRun(run.id);
  assert.equal(paused.status, "requires_action");
  assert.equal(paused.pending_actions.length, 1);
  assert.deepEqual(paused.pending_actions[0], {
    call_id: "1",
    kind: "client_tool",
    name: "lookup_order",
    arguments: { order_id: "42" },
  });

  const resumed = await runner.submitOutput(run.id, "1", { status: "shipped" });
  assert.ok(["queued", "running", "requires_action"].includes(resumed.status), resumed.status);

  await eventOf(runner, run.id, pauseFor("2"));
  const approval = await runner.getRun(run.id);
  assert.equal(approval.status, "requires_action");
  assert.equal(approval.pending_actions[0].call_id, "2");
  assert.equal(approval.pending_actions[0].kind, "approval");
  assert.equal(approval.pending_actions[0].name, "write_file");

  await runner.approve(run.id, "2");
  await eventOf(runner, run.id, isEnd);
  const ended = await runner.getRun(run.id);
  assert.equal(ended.status, "completed");
  assert.equal(ended.answer, "Noted.");
  assert.deepEqual(ended.pending_actions, []);
  const tool = (await runner.messages(run.id)).filter((message) => message.role === "tool");
  assert.deepEqual(
    tool.map((message) => [message.call_id, message.is_error]),
    [["1", false], ["2", false]],
  );
  assert.equal(tool[0].content, JSON.stringify({ status: "shipped" }));
});

test("deny and submitError are told to the model", async () => {
  const run = await runner.createRun(pausingRun());
  await eventOf(runner, run.id, pauseFor("1"));
  await runner.submitError(run.id, "1", "the order service is down");
  await eventOf(runner, run.id, pauseFor("2"));
  await runner.deny(run.id, "2", "not today");
  await eventOf(runner, run.id, isEnd);
  const ended = await runner.getRun(run.id);
  assert.ok(ended.finished_at);
  assert.equal(ended.status, "completed");
  const tool = (await runner.messages(run.id)).filter((message) => message.role === "tool");
  assert.equal(tool[0].is_error, true);
  assert.match(tool[0].content, /the order service is down/);
  assert.equal(tool[1].is_error, true);
  assert.match(tool[1].content, /Denied: not today/);
});

/** The run's end. */
function isEnd(event) {
  return event.type === "run_end";
}

/** The pause whose first pending call is `callId`. */
function pauseFor(callId) {
  return (event) => event.type === "actions_required" && event.actions[0]?.call_id === callId;
}

test("a run of attempts lists its attempts and takes the chosen one", async () => {
  const checked = await startServer({ config: '[commands.check]\nprogram = "true"\ncheck = true' });
  try {
    const client = new AgentRunner({ baseUrl: checked.baseUrl });
    const run = await client.createRun(
      {
        prompt: "try twice",
        model: { scripted: [{ content: "done" }] },
        commands: ["check"],
        attempts: { n: 2, until: "all" },
      },
      { wait: true },
    );
    assert.equal(run.status, "completed");
    assert.equal(run.chosen_attempt, 1);
    assert.deepEqual(run.attempt_policy, { n: 2, until: "all" });
    assert.deepEqual(
      run.attempts.map((a) => [a.attempt, a.checks_passed]),
      [
        [1, true],
        [2, true],
      ],
    );
    const children = [];
    for await (const child of client.listRuns({ parentRunId: run.id })) children.push(child);
    children.sort((a, b) => a.attempt - b.attempt);
    assert.deepEqual(
      children.map((c) => [c.attempt, c.parent_run_id]),
      [
        [1, run.id],
        [2, run.id],
      ],
    );
    assert.equal(children[1].temperature, 0.8);
  } finally {
    await checked.stop();
  }
});
