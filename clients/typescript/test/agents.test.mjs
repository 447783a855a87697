// Agents and structured output against a real server: an agent created,
// read, updated, listed and archived; runs that name one; runs whose answer
// must be JSON valid under a schema.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { AgentRunner, AgentRunnerError } from "../dist/index.js";
import { startServer } from "./support/server.mjs";
import { collect } from "./support/runs.mjs";

let server;
let runner;

before(async () => {
  server = await startServer();
  runner = new AgentRunner({ baseUrl: server.baseUrl });
});

after(async () => {
  await server?.stop();
});

/** Asserts that `promise` rejects with an AgentRunnerError of `status` and `code`. */
async function rejectsWith(promise, status, code) {
  const error = await promise.then(
    () => assert.fail(`expected a ${status} ${code}`),
    (error) => error,
  );
  assert.ok(error instanceof AgentRunnerError, `${error}`);
  assert.equal(error.status, status, error.message);
  assert.equal(error.code, code, error.message);
  return error;
}

/** A definition whose scripted model answers `answer`. */
function answering(answer) {
  return { instructions: "Answer briefly.", model: { scripted: [{ content: answer }] } };
}

/** The schema of a sorted ticket: `{"kind": "bug" | "question"}`. */
const TICKET = {
  type: "object",
  properties: { kind: { enum: ["bug", "question"] } },
  required: ["kind"],
  additionalProperties: false,
};

test("an agent is created, read, updated, listed by version and archived", async () => {
  const definition = { instructions: "Sort the ticket.", tools: ["list_dir"], limits: { max_steps: 4 } };
  const created = await runner.createAgent({ name: "triage", description: "Sorts tickets", ...definition });
  assert.equal(created.name, "triage");
  assert.equal(created.version, 1);
  assert.equal(created.description, "Sorts tickets");
  assert.deepEqual(created.definition, definition);
  assert.equal(created.archived, false);
  assert.ok(!Number.isNaN(Date.parse(created.created_at)), created.created_at);
  assert.deepEqual(await runner.getAgent("triage"), created);

  const updated = await runner.updateAgent("triage", { ...definition, instructions: "Sort the ticket well." });
  assert.equal(updated.version, 2);
  assert.equal(updated.description, null);
  assert.equal(updated.definition.instructions, "Sort the ticket well.");
  assert.deepEqual(await runner.getAgent("triage"), updated);
  assert.deepEqual(await runner.getAgent("triage", { version: 1 }), created);
  // `name` may be given, when it is the path's.
  const third = await runner.updateAgent("triage", { name: "triage", ...definition });
  assert.equal(third.version, 3);

  const versions = await collect(runner.listAgentVersions("triage", { limit: 2 }));
  assert.deepEqual(
    versions.map((agent) => agent.version),
    [3, 2, 1],
    "newest first, across pages",
  );
  assert.deepEqual(versions[2], created);
  const page = await runner.listAgentVersionsPage("triage", { limit: 2 });
  assert.deepEqual(
    page.versions.map((agent) => agent.version),
    [3, 2],
  );
  assert.ok(page.next_cursor);
  const rest = await runner.listAgentVersionsPage("triage", { limit: 2, cursor: page.next_cursor });
  assert.deepEqual(
    rest.versions.map((agent) => agent.version),
    [1],
  );
  assert.equal(rest.next_cursor, null);

  await runner.deleteAgent("triage");
  const archived = await runner.getAgent("triage");
  assert.equal(archived.archived, true);
  assert.equal(archived.version, 3);
  assert.equal((await runner.getAgent("triage", { version: 1 })).archived, true);
  await runner.deleteAgent("triage"); // archiving again is no error
  await rejectsWith(runner.updateAgent("triage", definition), 404, "agent_not_found");
  await rejectsWith(runner.createRun({ prompt: "hi", agent: "triage" }), 404, "agent_not_found");
  await rejectsWith(runner.createRun({ prompt: "hi", agent: "triage@1" }), 404, "agent_not_found");

  // Its name brings it back, as its next version.
  const back = await runner.createAgent({ name: "triage", ...definition });
  assert.equal(back.version, 4);
  assert.equal(back.archived, false);
  assert.equal((await runner.getAgent("triage", { version: 1 })).archived, false);
});

test("agents are listed by name, the live ones or the archived ones", async () => {
  for (const name of ["list-c", "list-a", "list-b"]) {
    await runner.createAgent({ name, ...answering(name) });
  }
  await runner.updateAgent("list-b", answering("list-b again"));
  await runner.deleteAgent("list-c");

  const live = (await collect(runner.listAgents({ limit: 1 }))).filter((agent) => agent.name.startsWith("list-"));
  assert.deepEqual(
    live.map((agent) => [agent.name, agent.version, agent.archived]),
    [
      ["list-a", 1, false],
      ["list-b", 2, false],
    ],
    "by name, each once, its latest version",
  );
  const names = (await collect(runner.listAgents())).map((agent) => agent.name);
  assert.deepEqual(names, [...names].sort(), "ascending");
  const archived = (await collect(runner.listAgents({ archived: true }))).map((agent) => agent.name);
  assert.ok(archived.includes("list-c"), `${archived}`);
  assert.ok(!archived.includes("list-a"), `${archived}`);

  const page = await runner.listAgentsPage({ limit: 1 });
  assert.equal(page.agents.length, 1);
  assert.ok(page.next_cursor);
  const next = await runner.listAgentsPage({ limit: 1, cursor: page.next_cursor });
  assert.ok(next.agents[0].name > page.agents[0].name, "the next page goes on after the first");
});

test("a name in use is 409 agent_exists; an unknown agent is 404 agent_not_found", async () => {
  await runner.createAgent({ name: "taken", ...answering("x") });
  await rejectsWith(runner.createAgent({ name: "taken", ...answering("y") }), 409, "agent_exists");
  assert.equal((await runner.getAgent("taken")).version, 1, "the refused creation changed nothing");

  await rejectsWith(runner.getAgent("nobody"), 404, "agent_not_found");
  await rejectsWith(runner.getAgent("taken", { version: 2 }), 404, "agent_not_found");
  await rejectsWith(runner.updateAgent("nobody", answering("x")), 404, "agent_not_found");
  await rejectsWith(runner.deleteAgent("nobody"), 404, "agent_not_found");
  await rejectsWith(runner.listAgentVersionsPage("nobody"), 404, "agent_not_found");
  await rejectsWith(runner.createRun({ prompt: "hi", agent: "nobody" }), 404, "agent_not_found");
  await rejectsWith(runner.createRun({ prompt: "hi", agent: "taken@2" }), 404, "agent_not_found");
});

test("a definition is validated as a run's: 422 naming the field", async () => {
  const refused = await rejectsWith(runner.createAgent({ name: "bad", prompt: "hi" }), 422, "invalid_request");
  assert.match(refused.message, /prompt/);
  await rejectsWith(runner.createAgent({ name: "bad", tools: ["teleport"] }), 422, "invalid_request");
  await rejectsWith(runner.createAgent({ name: "Not A Name" }), 422, "invalid_request");
  await rejectsWith(runner.createAgent({ name: "bad", output_schema: { type: 5 } }), 422, "invalid_request");
  await runner.createAgent({ name: "renamed", ...answering("x") });
  await rejectsWith(runner.updateAgent("renamed", { name: "other" }), 422, "invalid_request");
  await rejectsWith(runner.getAgent("bad"), 404, "agent_not_found");
});

test("a run names an agent: its latest version or one of them, under its own fields", async () => {
  await runner.createAgent({ name: "greeter", ...answering("Hello from version 1"), limits: { max_steps: 3, max_tool_calls: 7 } });
  await runner.updateAgent("greeter", { ...answering("Hello from version 2"), limits: { max_steps: 3, max_tool_calls: 7 } });

  const latest = await runner.createRun({ prompt: "Say hello", agent: "greeter" }, { wait: true });
  assert.equal(latest.status, "completed");
  assert.equal(latest.answer, "Hello from version 2");
  assert.deepEqual(latest.agent, { name: "greeter", version: 2 });
  assert.equal(latest.prompt, "Say hello");
  assert.equal(latest.instructions, "Answer briefly.");
  assert.equal(latest.limits.max_tool_calls, 7);

  const first = await runner.createRun({ prompt: "Say hello", agent: "greeter@1" }, { wait: true });
  assert.equal(first.answer, "Hello from version 1");
  assert.deepEqual(first.agent, { name: "greeter", version: 1 });

  // The request's fields replace the definition's; limits key by key.
  const own = await runner.createRun(
    {
      prompt: "Say hello",
      agent: "greeter@1",
      model: { scripted: [{ content: "My own hello" }] },
      limits: { max_steps: 2 },
    },
    { wait: true },
  );
  assert.equal(own.answer, "My own hello");
  assert.deepEqual(own.agent, { name: "greeter", version: 1 });
  assert.equal(own.limits.max_steps, 2);
  assert.equal(own.limits.max_tool_calls, 7);

  const runs = await collect(runner.listRuns({ agent: "greeter", limit: 2 }));
  assert.deepEqual(
    runs.map((run) => run.id),
    [own.id, first.id, latest.id],
    "the agent's runs, of every version, newest first",
  );

  const plain = await runner.createRun({ prompt: "hi", model: { scripted: [{ content: "plain" }] } }, { wait: true });
  assert.equal(plain.agent, null);
  assert.equal(plain.output_schema, null);
  assert.equal(plain.output, null);
});

test("a run with an output schema carries the parsed answer as output", async () => {
  const run = await runner.createRun(
    { prompt: "Sort: the app crashes", output_schema: TICKET, model: { scripted: [{ content: '{"kind": "bug"}' }] } },
    { wait: true },
  );
  assert.equal(run.status, "completed");
  assert.deepEqual(run.output, { kind: "bug" });
  assert.equal(run.answer, '{"kind": "bug"}');
  assert.deepEqual(run.output_schema, TICKET);
  assert.equal(run.limits.output_retries, 2);
  const events = await collect(runner.events(run.id));
  const end = events.at(-1);
  assert.equal(end.type, "run_end");
  assert.deepEqual(end.output, { kind: "bug" });
});

test("an answer that is not valid is sent back; past output_retries the run fails output_invalid", async () => {
  const retried = await runner.createRun(
    {
      prompt: "Sort: how do I log in?",
      output_schema: TICKET,
      model: { scripted: [{ content: "It is a question." }, { content: '```json\n{"kind": "question"}\n```' }] },
    },
    { wait: true },
  );
  assert.equal(retried.status, "completed");
  assert.equal(retried.steps, 2);
  assert.deepEqual(retried.output, { kind: "question" });

  const failed = await runner.createRun(
    {
      prompt: "Sort: the app crashes",
      output_schema: TICKET,
      limits: { output_retries: 1 },
      model: { scripted: [{ content: '{"kind": "crash"}' }, { content: "A bug." }] },
    },
    { wait: true },
  );
  assert.equal(failed.status, "failed");
  assert.match(failed.error, /^output_invalid/);
  assert.equal(failed.answer, "A bug.");
  assert.equal(failed.output, null);
  assert.equal(failed.limits.output_retries, 1);
});

test("an agent's output schema holds for the runs that name it", async () => {
  await runner.createAgent({
    name: "sorter",
    output_schema: TICKET,
    model: { scripted: [{ content: '{"kind": "question"}' }] },
  });
  const run = await runner.createRun({ prompt: "Sort: where is the manual?", agent: "sorter" }, { wait: true });
  assert.equal(run.status, "completed");
  assert.deepEqual(run.agent, { name: "sorter", version: 1 });
  assert.deepEqual(run.output_schema, TICKET);
  assert.deepEqual(run.output, { kind: "question" });
});
