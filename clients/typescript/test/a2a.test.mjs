// Stored agents as A2A servers, driven by the official A2A client
// (@a2a-js/sdk, protocol 1.0) against the real server: send, stream to the
// end, get, cancel, a task waiting for input answered through A2A, and
// another tenant's agent refused.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, test } from "node:test";
import { Role, TaskState } from "@a2a-js/sdk";
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
} from "@a2a-js/sdk/client";
import { startServer } from "./support/server.mjs";

const ONE = "a2a-js-tenant-one";
const TWO = "a2a-js-tenant-two";
let server;

before(async () => {
  server = await startServer({
    config: [
      "[[auth.tokens]]",
      'tenant = "one"',
      `token = "${ONE}"`,
      "[[auth.tokens]]",
      'tenant = "two"',
      `token = "${TWO}"`,
    ].join("\n"),
  });
  const agents = {
    greeter: { description: "Greets whoever asks", model: { scripted: [{ content: "hello there" }] } },
    sleeper: { model: { scripted: [{ delay_ms: 60000, content: "late" }] } },
    writer: {
      tools: ["write_file"],
      approval: { tools: ["write_file"] },
      model: {
        scripted: [
          {
            content: "",
            tool_calls: [{ id: "w", name: "write_file", arguments: { path: "a.txt", content: "hi" } }],
          },
          { content: "written" },
        ],
      },
    },
  };
  for (const [name, definition] of Object.entries(agents)) {
    const response = await fetch(`${server.baseUrl}/v1/agents`, {
      method: "POST",
      headers: { authorization: `Bearer ${ONE}`, "content-type": "application/json" },
      body: JSON.stringify({ name, ...definition }),
    });
    assert.equal(response.status, 201, await response.text());
  }
});

after(async () => {
  await server?.stop();
});

/** A client of `agent` made from its card, with `token` on every request. */
async function connect(agent, token = ONE) {
  const withToken = (url, init = {}) => {
    const headers = new Headers(init.headers);
    headers.set("authorization", `Bearer ${token}`);
    return fetch(url, { ...init, headers });
  };
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl: withToken })],
      cardResolver: new DefaultAgentCardResolver({ fetchImpl: withToken }),
    }),
  );
  // The card is found relative to the agent's URL, a directory.
  return factory.createFromUrl(`${server.baseUrl}/a2a/${agent}/`);
}

function message(text, extra = {}, data = undefined) {
  const parts = text ? [{ content: { $case: "text", value: text } }] : [];
  if (data !== undefined) parts.push({ content: { $case: "data", value: data } });
  return { messageId: randomUUID(), role: Role.ROLE_USER, parts, ...extra };
}

const state = (task) => TaskState[task.status.state];
const text = (part) => part.content.value;

test("a task is sent, streamed to its end, got and cancelled", async () => {
  const client = await connect("greeter");
  assert.equal(client.agentCard.name, "greeter");
  assert.equal(client.agentCard.capabilities.streaming, true);

  const task = await client.sendMessage({ message: message("Say hello.") });
  assert.equal(state(task), "TASK_STATE_COMPLETED");
  assert.equal(text(task.artifacts[0].parts[0]), "hello there");

  const events = [];
  for await (const event of client.sendMessageStream({
    message: message("Again.", { contextId: task.contextId }),
  })) {
    events.push(event.payload);
  }
  const kinds = events.map((payload) => payload.$case);
  assert.equal(kinds[0], "task", `${kinds}`);
  assert.equal(kinds.at(-1), "statusUpdate", `${kinds}`);
  assert.ok(kinds.includes("artifactUpdate"), `${kinds}`);
  assert.equal(TaskState[events.at(-1).value.status.state], "TASK_STATE_COMPLETED");
  assert.equal(events[0].value.contextId, task.contextId);

  const got = await client.getTask({ id: task.id, historyLength: 10 });
  assert.equal(state(got), "TASK_STATE_COMPLETED");
  assert.deepEqual(got.history.map((m) => text(m.parts[0])), ["Say hello.", "hello there"]);

  await assert.rejects(client.cancelTask({ id: task.id }), (error) => {
    assert.equal(error.name, "TaskNotCancelableError", `${error}`);
    return true;
  });
  await assert.rejects(client.getTask({ id: randomUUID() }), (error) => {
    assert.equal(error.name, "TaskNotFoundError", `${error}`);
    return true;
  });

  const sleeper = await connect("sleeper");
  const started = await sleeper.sendMessage({
    message: message("Take your time."),
    configuration: { returnImmediately: true },
  });
  assert.ok(["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"].includes(state(started)), state(started));
  const cancelled = await sleeper.cancelTask({ id: started.id });
  assert.equal(state(cancelled), "TASK_STATE_CANCELED");
});

test("a task waiting for input is answered through A2A", async () => {
  const client = await connect("writer");
  const task = await client.sendMessage({ message: message("Write a.txt.") });
  assert.equal(state(task), "TASK_STATE_INPUT_REQUIRED");
  const data = task.status.message.parts.find((part) => part.content.$case === "data");
  assert.deepEqual(data.content.value.actions, [
    { call_id: "w", kind: "approval", name: "write_file", arguments: { path: "a.txt", content: "hi" } },
  ]);
  const answers = { actions: [{ call_id: "w", decision: "approve" }] };
  const done = await client.sendMessage({
    message: message("", { taskId: task.id, contextId: task.contextId }, answers),
  });
  assert.equal(done.id, task.id);
  assert.equal(state(done), "TASK_STATE_COMPLETED");
  assert.equal(text(done.artifacts[0].parts[0]), "written");
  const file = await fetch(`${server.baseUrl}/v1/runs/${task.id}/workspace/a.txt`, {
    headers: { authorization: `Bearer ${ONE}` },
  });
  assert.equal(await file.text(), "hi");
});

test("another tenant's agent is refused", async () => {
  await assert.rejects(connect("greeter", TWO), /404/);
  const response = await fetch(`${server.baseUrl}/a2a/greeter`, {
    method: "POST",
    headers: { authorization: `Bearer ${TWO}`, "content-type": "application/json" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "GetTask", params: { id: "x" } }),
  });
  assert.equal(response.status, 404);
  assert.equal((await response.json()).error.code, "agent_not_found");
});
