// Schedules against a real server: one made, read, listed, changed,
// triggered and deleted; its runs listed by it; a follow-up of a live run
// that interrupts it.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { AgentRunner, AgentRunnerError } from "../dist/index.js";
import { eventOf } from "./support/runs.mjs";
import { startServer } from "./support/server.mjs";

let server;
let runner;

before(async () => {
  server = await startServer();
  runner = new AgentRunner({ baseUrl: server.baseUrl });
});

after(async () => {
  await server?.stop();
});

const QUICK = { prompt: "tick", tools: [], model: { scripted: [{ content: "ticked" }] } };

/** The run's final state, followed through its events. */
async function ended(runId) {
  await eventOf(runner, runId, (event) => event.type === "run_end");
  return runner.getRun(runId);
}

test("a schedule is made, read, listed, changed, triggered and deleted", async () => {
  const made = await runner.createSchedule({
    cron: "0 9 * * 1-5",
    timezone: "Europe/Berlin",
    run: QUICK,
    name: "morning",
  });
  assert.equal(made.cron, "0 9 * * 1-5");
  assert.equal(made.thread, "new");
  assert.equal(made.overlap, "skip");
  assert.ok(made.next_run_at);
  assert.deepEqual(await runner.getSchedule(made.id), made);
  const listed = [];
  for await (const schedule of runner.listSchedules({ limit: 1 })) listed.push(schedule.id);
  assert.ok(listed.includes(made.id));

  const paused = await runner.updateSchedule(made.id, { enabled: false, name: null });
  assert.equal(paused.enabled, false);
  assert.equal(paused.next_run_at, null);
  assert.equal(paused.name, null);
  const run = await runner.triggerSchedule(made.id);
  assert.equal(run.schedule_id, made.id);
  assert.equal(run.schedule_tick, null);
  assert.equal((await ended(run.id)).answer, "ticked");
  const page = await runner.listRunsPage({ scheduleId: made.id });
  assert.deepEqual(
    page.runs.map((r) => r.id),
    [run.id],
  );

  const refused = await runner.createSchedule({ cron: "nine", run: QUICK }).then(
    () => assert.fail("an invalid cron was taken"),
    (error) => error,
  );
  assert.ok(refused instanceof AgentRunnerError);
  assert.equal(refused.status, 422);
  assert.match(refused.message, /cron/);

  await runner.deleteSchedule(made.id);
  const gone = await runner.getSchedule(made.id).then(
    () => assert.fail("a deleted schedule was read"),
    (error) => error,
  );
  assert.equal(gone.status, 404);
});

test("a follow-up that interrupts a live run continues from it", async () => {
  const live = await runner.createRun({
    prompt: "wait",
    tools: [],
    model: { scripted: [{ content: "late", delay_ms: 60_000 }] },
  });
  await eventOf(runner, live.id, (event) => event.type === "model_start");
  const next = await runner.createRun({
    prompt: "instead",
    previous_run_id: live.id,
    multitask: "interrupt",
    model: { scripted: [{ content: "sooner" }] },
  });
  assert.equal(next.status, "queued");
  assert.equal((await ended(live.id)).status, "aborted");
  assert.equal((await ended(next.id)).answer, "sooner");
});
