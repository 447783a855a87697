// Errors against real servers: the server's codes, Retry-After, a bearer
// token, and a server that is not there.
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { once } from "node:events";
import { after, before, test } from "node:test";
import { AgentRunner, AgentRunnerError } from "../dist/index.js";
import { startServer } from "./support/server.mjs";
import { listThenDone } from "./support/runs.mjs";

const TOKEN = "client-test-token";
let server;
let secured;
let runner;

before(async () => {
  [server, secured] = await Promise.all([
    startServer(),
    // Tokens, and a tenant that may create one run a minute.
    startServer({
      config: ["[[auth.tokens]]", 'tenant = "team-a"', `token = "${TOKEN}"`, "[tenants.team-a]", "runs_per_minute = 1"].join(
        "\n",
      ),
    }),
  ]);
  runner = new AgentRunner({ baseUrl: server.baseUrl });
});

after(async () => {
  await Promise.all([server?.stop(), secured?.stop()]);
});

/** Asserts that `promise` rejects with an AgentRunnerError like `expected`. */
async function rejectsWith(promise, expected) {
  const error = await promise.then(
    () => assert.fail("expected an AgentRunnerError"),
    (error) => error,
  );
  assert.ok(error instanceof AgentRunnerError, `${error}`);
  assert.equal(error.name, "AgentRunnerError");
  for (const [key, value] of Object.entries(expected)) {
    if (value instanceof RegExp) assert.match(error[key], value, key);
    else assert.equal(error[key], value, key);
  }
  return error;
}

test("a body of the wrong shape is 422 invalid_request, naming the field", async () => {
  await rejectsWith(runner.createRun({ prompt: "" }), {
    status: 422,
    code: "invalid_request",
    message: /prompt/,
  });
  await rejectsWith(runner.createRun({ prompt: "hi", tools: ["teleport"] }), {
    status: 422,
    code: "invalid_request",
  });
});

test("an unknown run is 404 not_found, for every call", async () => {
  const id = "01a22985-2898-7256-bd76-a3a04a90e80a";
  const expected = { status: 404, code: "not_found" };
  await rejectsWith(runner.getRun(id), expected);
  await rejectsWith(runner.cancel(id), expected);
  await rejectsWith(runner.messages(id), expected);
  await rejectsWith(runner.approve(id, "1"), expected);
  await rejectsWith(runner.events(id).next(), expected);
});

test("answers for a run that waits for nothing are 409 run_not_paused", async () => {
  const run = await runner.createRun(listThenDone(), { wait: true });
  await rejectsWith(runner.approve(run.id, "1"), { status: 409, code: "run_not_paused" });
});

test("a bad cursor is 400 invalid_query", async () => {
  await rejectsWith(runner.listRunsPage({ cursor: "not-a-run-id" }), { status: 400, code: "invalid_query" });
});

test("the bearer token is sent; without it the server answers 401", async () => {
  await rejectsWith(new AgentRunner({ baseUrl: secured.baseUrl }).listRunsPage(), {
    status: 401,
    code: "unauthorized",
  });
  await rejectsWith(new AgentRunner({ baseUrl: secured.baseUrl, token: "wrong" }).listRunsPage(), {
    status: 401,
    code: "unauthorized",
  });
  const authorized = new AgentRunner({ baseUrl: secured.baseUrl, token: TOKEN });
  const run = await authorized.createRun(listThenDone(), { wait: true });
  assert.equal(run.status, "completed");
  const events = [];
  for await (const event of authorized.events(run.id)) events.push(event);
  assert.equal(events.at(-1).type, "run_end");
  // The tenant's second run within the minute: 429 with Retry-After.
  const error = await rejectsWith(authorized.createRun(listThenDone()), { status: 429, code: "rate_limited" });
  assert.ok(Number.isInteger(error.retryAfter) && error.retryAfter > 0, `retryAfter ${error.retryAfter}`);
});

test("a server that is not there is code unreachable, saying how to start one", async () => {
  // A port that was free a moment ago, and is closed now.
  const probe = createServer().listen(0, "127.0.0.1");
  await once(probe, "listening");
  const { port } = probe.address();
  probe.close();
  await once(probe, "close");
  const absent = new AgentRunner({ baseUrl: `http://127.0.0.1:${port}` });
  const error = await rejectsWith(absent.getRun("01a22985-2898-7256-bd76-a3a04a90e80a"), {
    code: "unreachable",
    status: undefined,
    message: /agent-runner serve.*baseUrl/,
  });
  assert.match(error.message, /ECONNREFUSED/);
  assert.match(error.message, new RegExp(`127\\.0\\.0\\.1:${port}`));
  await rejectsWith(absent.events("01a22985-2898-7256-bd76-a3a04a90e80a").next(), { code: "unreachable" });
});
