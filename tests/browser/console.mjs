// Drives the console in headless Chromium (Debian's, through playwright-core)
// against a real server, through one scenario, and saves a screenshot of
// each page it looks at. Fails (exit 1, the reason on stderr) when the
// console does not do what the scenario expects.
//
//   node console.mjs INSTALL_DIR BASE_URL SCENARIO SCREENSHOT_DIR [TOKEN]
//
// The scenario makes its own runs over the API (with TOKEN, if given) and
// prints a JSON object of what the calling test checks on the server.
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

import { launch } from "./chromium.mjs";

const [installDir, base, scenario, shots, token] = process.argv.slice(2);
const module = join(installDir, "node_modules/playwright-core/index.mjs");
const { chromium } = await import(pathToFileURL(module).href);
mkdirSync(shots, { recursive: true });

const WAIT = 15_000;

async function api(method, path, body, withToken = token) {
  const headers = {};
  if (withToken) headers.Authorization = `Bearer ${withToken}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(base + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text();
  assert.ok(response.ok, `${method} ${path}: ${response.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

const scripted = (steps) => ({ scripted: steps });
const call = (id, name, args) => ({ id, name, arguments: args });

/** A run that takes a few steps, `delay` ms each, and answers `answer`. */
function slowRun(prompt, steps, delay, answer) {
  const script = [];
  for (let i = 1; i <= steps; i += 1) {
    script.push({ content: "", delay_ms: delay, tool_calls: [call(`c${i}`, "list_dir", {})] });
  }
  script.push({ content: answer, delay_ms: delay });
  return { prompt, tools: ["list_dir"], model: scripted(script) };
}

const browser = await launch(chromium);
const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
const page = await context.newPage();
const problems = [];
page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
page.on("console", (message) => {
  // A refused request is logged by the browser itself; the scenarios check
  // what the page makes of it.
  if (message.type() === "error" && !message.text().startsWith("Failed to load resource")) {
    problems.push(`console error: ${message.text()}`);
  }
});

// The streams the page holds open at once, and the most it ever held.
const streams = { open: 0, most: 0 };
const isStream = (request) => /\/events(\?|$)/.test(request.url());
page.on("request", (request) => {
  if (isStream(request)) {
    streams.open += 1;
    streams.most = Math.max(streams.most, streams.open);
  }
});
const closed = (request) => {
  if (isStream(request)) streams.open -= 1;
};
page.on("requestfinished", closed);
page.on("requestfailed", closed);

const shot = (name) => page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
const item = (id) => page.locator(`.run-item[data-run-id="${id}"]`);
const statusOf = (id) => item(id).locator(".status");

async function expectText(locator, text, what) {
  await locator.filter({ hasText: text }).first().waitFor({ timeout: WAIT }).catch(async () => {
    throw new Error(`${what}: expected ${JSON.stringify(text)}, saw ${JSON.stringify(await locator.allTextContents())}`);
  });
}

const scenarios = {
  // A run of attempts shows them side by side: each its status, whether
  // its checks passed, its diff; the chosen one marked.
  async attempts() {
    const script = [
      { content: "", tool_calls: [call("w1", "write_file", { path: "notes.txt", content: "tried\n" })] },
      { content: "done" },
    ];
    const run = await api("POST", "/v1/runs", {
      prompt: "try twice",
      model: scripted(script),
      commands: ["check"],
      attempts: { n: 2, until: "all" },
    });
    await page.goto(`${base}/#/runs/${run.id}`);
    await expectText(page.locator("#run-status"), "completed", "the run's end");
    const cards = page.locator("#attempts .attempt");
    await page.waitForFunction(() => document.querySelectorAll("#attempts .attempt .diff .line").length > 0 && document.querySelectorAll("#attempts .attempt").length === 2, null, { timeout: WAIT });
    assert.equal(await cards.count(), 2);
    await expectText(page.locator("#attempts .attempt.chosen .attempt-head a"), "Attempt 1", "the chosen attempt");
    assert.equal(await page.locator("#attempts .attempt-checks.passed").count(), 2, "both passed their checks");
    for (let i = 0; i < 2; i += 1) {
      await cards.nth(i).locator(".diff .line", { hasText: "+tried" }).waitFor({ timeout: WAIT });
    }
    await shot("console-attempts");
    return { attempts: await cards.count() };
  },

  // A run that delegates shows its sub-agents' runs as a tree; a child's
  // pause shows on it, and is approved there.
  async subruns() {
    const leaf = { description: "looks", model: scripted([{ content: "leaf answer" }]) };
    const helper = { subagents: { leaf }, model: scripted([
      { content: "", tool_calls: [call("l1", "delegate", { agent: "leaf", prompt: "look deeper" })] },
      { content: "helped" },
    ]) };
    const asker = { tools: ["write_file"], approval: { tools: ["write_file"] }, model: scripted([
      { content: "", tool_calls: [call("w1", "write_file", { path: "asked.txt", content: "yes\n" })] },
      { content: "asked and wrote" },
    ]) };
    const run = await api("POST", "/v1/runs", {
      prompt: "delegate twice",
      subagents: { helper, asker },
      model: scripted([
        { content: "", tool_calls: [call("d1", "delegate", { agent: "helper", prompt: "help out" }), call("d2", "delegate", { agent: "asker", prompt: "ask first" })] },
        { content: "all done" },
      ]),
    });
    await page.goto(`${base}/#/runs/${run.id}`);
    await expectText(page.locator("#run-status"), "requires_action", "the child's pause, on its parent");
    const item = page.locator("#pending .pending-item");
    await item.locator(".pending-run").waitFor({ timeout: WAIT });
    await item.locator("button.approve").click();
    await expectText(page.locator("#run-status"), "completed", "the run's end");
    await page.waitForFunction(() => document.querySelectorAll("#subruns .subrun").length === 3, null, { timeout: WAIT });
    const nested = await page.locator("#subruns .subrun .subruns .subrun").count();
    assert.equal(nested, 1, "the helper's own child, under it");
    await expectText(page.locator("#subruns .subrun .subruns .subrun .status"), "completed", "the leaf's end");
    await shot("console-subruns");
    return { subruns: await page.locator("#subruns .subrun").count(), nested };
  },

  // A call that fell back to another profile shows the fallback; an
  // approval edited in the console runs the edited arguments, and the
  // transcript and events say so. An edit in progress outlives the page's
  // reads of the run (here the one that follows answering the other call of
  // the batch). (The server's profile `flaky` is out of retries once, then
  // answers; `steady` asks to write two files.)
  async edited() {
    const run = await api("POST", "/v1/runs", {
      prompt: "write the notes",
      model: "flaky",
      tools: ["write_file"],
      approval: { tools: ["write_file"] },
    });
    await page.goto(`${base}/#/runs/${run.id}`);
    await expectText(page.locator("#run-status"), "requires_action", "the pause");
    const pending = (callId) => page.locator(`#pending .pending-item[data-call-id="${callId}"]`);
    const args = pending("w1").locator("textarea.arguments");
    await args.waitFor({ timeout: WAIT });
    await args.fill(JSON.stringify({ path: "notes.txt", content: "edited\n" }));
    await expectText(pending("w1").locator("button.approve"), "Approve edited", "the button of an edit");
    // Clicked from a script, so the focus stays where the edit is typed.
    await pending("w2").locator("button.approve").evaluate((button) => button.click());
    await pending("w2").waitFor({ state: "detached", timeout: WAIT });
    assert.equal(await args.inputValue(), JSON.stringify({ path: "notes.txt", content: "edited\n" }), "the edit, after the run was read again");
    assert.ok(await args.evaluate((element) => element === document.activeElement), "the edit keeps the focus");
    await expectText(pending("w1").locator("button.approve"), "Approve edited", "the button of the edit, after the run was read again");
    await pending("w1").locator("button.approve").click();
    await expectText(page.locator("#run-status"), "completed", "the run's end");
    // Read again from the start: what the page shows of a run that ended
    // (following one live across its pause is the "approve" scenario's).
    await page.reload();
    await expectText(page.locator("#run-status"), "completed", "the run's end, read again");
    await expectText(page.locator("#transcript .message .edited"), "arguments edited by a reviewer", "the edited result");
    await expectText(page.locator("#events .type-model_fallback .summary"), "flaky → steady", "the fallback");
    await expectText(page.locator("#events .type-tool_start .summary"), "arguments edited", "the edited call");
    await expectText(page.locator("#events .type-model_end .summary"), "answered by steady", "the answering profile");
    await shot("console-edited");
    return { run: run.id, edited: await page.locator("#transcript .message .edited").first().textContent() };
  },

  // A priced run shows what it cost, against its bound, and its cache's
  // tokens; each call's on its model_end.
  async cost() {
    const run = await api("POST", "/v1/runs", {
      prompt: "look, once", model: "priced", tools: ["list_dir"], limits: { max_cost_usd: 100, max_steps: 2 },
    });
    await page.goto(`${base}/#/runs/${run.id}`);
    await expectText(page.locator("#run-status"), "completed", "the run's end");
    const facts = await page.locator("#run-facts").innerText();
    assert.ok(facts.includes("2000 in (1200 cached, 400 written to the cache), 20 out"), facts);
    assert.ok(facts.includes("$0.00336 of $100"), facts);
    const ends = page.locator(".event.type-model_end");
    await ends.nth(1).waitFor({ timeout: WAIT });
    const first = await ends.first().innerText();
    assert.ok(first.includes("1000 in (600 cached, 200 written to the cache), 10 out · $0.00168"), first);
    await shot("console-cost");
    return { facts, first };
  },

  // The list follows runs as they are made and change, without a reload.
  async list() {
    await page.goto(base + "/");
    await page.locator("#connection[data-state=open]").waitFor({ timeout: WAIT });
    const asks = (prompt) => ({ prompt, approval: { tools: ["write_file"] },
      model: scripted([{ content: "", tool_calls: [call("w1", "write_file", { path: "a.txt", content: "x" })] }, { content: "ok" }]) });
    const first = await api("POST", "/v1/runs", asks("first: ask, then write"));
    const second = await api("POST", "/v1/runs", slowRun("second: look around", 1, 10, "looked"));
    const third = await api("POST", "/v1/runs", asks("third: wait for me"));
    for (const run of [first, second, third]) await item(run.id).waitFor({ timeout: WAIT });
    await expectText(statusOf(first.id), "requires_action", "the first run's pause");
    await expectText(statusOf(second.id), "completed", "the second run's end");
    await expectText(statusOf(third.id), "requires_action", "the third run's pause");
    // Answered elsewhere: the list follows, without a reload.
    await api("POST", `/v1/runs/${first.id}/actions`, { actions: [{ call_id: "w1", decision: "approve" }] });
    await expectText(statusOf(first.id), "completed", "the first run, answered elsewhere");
    const order = await page.locator(".run-item").evaluateAll((items) => items.map((item) => item.dataset.runId));
    assert.deepEqual(order.slice(0, 3), [third.id, second.id, first.id], "newest first");
    await shot("console-list");
    // The filter shows the runs of one status.
    await page.selectOption("#filter", "requires_action");
    await page.waitForFunction(() => [...document.querySelectorAll(".run-item")].every((item) => item.dataset.status === "requires_action"), null, { timeout: WAIT });
    assert.equal(await page.locator(".run-item").count(), 1);
    await page.selectOption("#filter", "");
    return { runs: [first.id, second.id, third.id] };
  },

  // Opening a run shows its events as they happen and its transcript; what
  // a run produced is shown as text, never run as markup.
  async run() {
    const hostile = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>';
    // It waits for an approval (so the page is open while it is live),
    // then takes a few steps more.
    const script = [{ content: "", tool_calls: [call("w1", "write_file", { path: "a.txt", content: "x" })] }];
    for (let i = 1; i <= 3; i += 1) {
      script.push({ content: "", delay_ms: 100, tool_calls: [call(`c${i}`, "list_dir", {})] });
    }
    script.push({ content: `done ${hostile}` });
    const run = await api("POST", "/v1/runs", { prompt: `look, ${hostile}`, approval: { tools: ["write_file"] }, model: scripted(script) });
    await page.goto(`${base}/#/runs/${run.id}`);
    await page.locator("#events .event.type-actions_required").waitFor({ timeout: WAIT });
    const during = await page.locator("#events .event").count();
    await api("POST", `/v1/runs/${run.id}/actions`, { actions: [{ call_id: "w1", decision: "approve" }] });
    await page.locator("#events .event.type-run_end").waitFor({ timeout: WAIT });
    const after = await page.locator("#events .event").count();
    assert.ok(during < after, `events arrived while it ran (${during} then ${after})`);
    const sequences = await page.locator("#events .event").evaluateAll((items) => items.map((item) => Number(item.dataset.sequence)));
    assert.deepEqual(sequences, sequences.map((_, i) => i + 1), "every event once, in order");
    await expectText(page.locator("#run-status"), "completed", "the run's status");
    await expectText(page.locator("#transcript .message.assistant .content"), `done ${hostile}`, "the answer, as text");
    await expectText(page.locator("#transcript .message.user .content"), `look, ${hostile}`, "the prompt, as text");
    assert.equal(await page.evaluate(() => window.__pwned), undefined, "nothing of the run ran as code");
    assert.equal(await page.locator("#transcript img, #transcript script").count(), 0);
    await shot("console-run");
    // Opening another run and this one again, quickly: one stream each time.
    const other = await api("POST", "/v1/runs?wait=true", { prompt: "another" });
    for (const id of [other.id, run.id, other.id, run.id]) {
      // Each opened before the last one's read came back.
      await page.evaluate((to) => { location.hash = `#/runs/${to}`; }, id);
    }
    await page.locator("#events .event.type-run_end").waitFor({ timeout: WAIT });
    await page.waitForTimeout(300);
    const again = await page.locator("#events .event").count();
    assert.equal(again, after, "its events once, after switching back and forth");
    return { run: run.id, events: after };
  },

  // Cancel ends a running run.
  async cancel() {
    const run = await api("POST", "/v1/runs", { prompt: "take your time", model: scripted([{ content: "late", delay_ms: 30_000 }]) });
    await page.goto(`${base}/#/runs/${run.id}`);
    await page.locator("#run-status").filter({ hasText: "running" }).waitFor({ timeout: WAIT });
    await page.click("#cancel");
    await expectText(page.locator("#run-status"), "aborted", "the run after its cancel");
    assert.ok(await page.locator("#cancel").isHidden(), "no cancel for an ended run");
    await expectText(statusOf(run.id), "aborted", "the list after the cancel");
    await shot("console-cancelled");
    return { run: run.id };
  },

  // A pending call is approved from the page, and the run goes on.
  async approve() {
    // Company in the list, for the screenshot.
    await api("POST", "/v1/runs?wait=true", { prompt: "List the files in the workspace" });
    const stopped = await api("POST", "/v1/runs", { prompt: "Refactor the parser", model: scripted([{ content: "", delay_ms: 30_000 }]) });
    await api("DELETE", `/v1/runs/${stopped.id}`);
    const run = await api("POST", "/v1/runs", {
      prompt: "write it, with permission",
      approval: { tools: ["write_file"] },
      model: scripted([
        { content: "", tool_calls: [call("w1", "write_file", { path: "note.txt", content: "approved in the browser" })] },
        { content: "written" },
      ]),
    });
    await page.goto(`${base}/#/runs/${run.id}`);
    const pending = page.locator('.pending-item[data-call-id="w1"]');
    await pending.waitFor({ timeout: WAIT });
    // The proposal, editable.
    const proposal = await pending.locator("textarea.arguments").inputValue();
    assert.ok(proposal.includes("approved in the browser"), `the call's arguments: ${proposal}`);
    await shot("console-approval");
    await pending.locator("button.approve").click();
    await expectText(page.locator("#run-status"), "completed", "the run after the approval");
    assert.ok(await page.locator("#pending").isHidden(), "nothing pending any more");
    return { run: run.id };
  },

  // The form makes a run, which opens.
  async create() {
    await page.goto(base + "/");
    await page.locator("#connection[data-state=open]").waitFor({ timeout: WAIT });
    await page.click("#new-run");
    await page.fill('#create textarea[name="prompt"]', "hello from the form");
    await page.fill('#create textarea[name="instructions"]', "Be brief.");
    await page.locator('#create select[name="profile"] option[value="demo"]').waitFor({ state: "attached", timeout: WAIT });
    await page.selectOption('#create select[name="profile"]', "demo");
    await page.uncheck('#create input[name="tool"][value="write_file"]');
    await shot("console-create");
    await page.click("#create-submit");
    await page.waitForURL(/#\/runs\/[0-9a-f-]{36}$/, { timeout: WAIT });
    const id = page.url().split("/").pop();
    await expectText(page.locator("#run-status"), "completed", "the new run");
    await item(id).waitFor({ timeout: WAIT });
    // A refusal is shown in the form, and nothing is made.
    await page.click("#new-run");
    await page.fill('#create textarea[name="prompt"]', "no tools at all");
    await page.uncheck('#create input[name="tool"][value="list_dir"]');
    await page.uncheck('#create input[name="tool"][value="read_file"]');
    await page.check('#create input[name="approve"][value="write_file"]');
    await page.selectOption('#create select[name="profile"]', "demo");
    await page.evaluate(() => {
      // A profile the server does not have: its refusal is what is shown.
      const option = document.createElement("option");
      option.value = "no-such-profile";
      option.textContent = "no-such-profile";
      document.querySelector('#create select[name="profile"]').append(option);
    });
    await page.selectOption('#create select[name="profile"]', "no-such-profile");
    await page.click("#create-submit");
    await page.locator("#create-error").filter({ hasText: "no-such-profile" }).waitFor({ timeout: WAIT });
    return { run: id };
  },

  // A streaming model's text shows as it comes, then as its message.
  // PROVIDER holds the model back after its first words until released.
  async streaming() {
    const run = await api("POST", "/v1/runs", { prompt: "tell me a story", model: "gated", tools: [] });
    await page.goto(`${base}/#/runs/${run.id}`);
    // Followed live from its model call on.
    await page.locator("#events .event.type-model_start").waitFor({ timeout: WAIT });
    const release = async () => assert.ok((await fetch(`${process.env.PROVIDER}/release`)).ok);
    await release();
    const streaming = page.locator("#transcript .message.streaming .content");
    await streaming.filter({ hasText: "Once upon" }).waitFor({ timeout: WAIT });
    assert.equal(await page.locator("#run-status").textContent(), "running");
    await shot("console-streaming");
    await release();
    await page.locator("#events .event.type-run_end").waitFor({ timeout: WAIT });
    await expectText(page.locator("#transcript .message.assistant .content"), "Once upon a time, a run ended well.", "the whole message");
    assert.equal(await page.locator("#transcript .message.streaming").count(), 0, "the streamed text gave way to its message");
    return { run: run.id };
  },

  // The agents of the tenant, an agent's versions and its runs, and the
  // output of a run with an output schema; what an agent holds and what a
  // run answered are shown as text.
  async agents() {
    const hostile = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>';
    const schema = {
      type: "object",
      properties: { label: { enum: ["bug", "question"] }, note: { type: "string" } },
      required: ["label"],
    };
    const answer = (label) => scripted([{ content: JSON.stringify({ label, note: `sorted ${hostile}` }) }]);
    const first = await api("POST", "/v1/agents", {
      name: "triage",
      description: "Sorts tickets",
      instructions: "Sort the ticket.",
      model: answer("question"),
      output_schema: schema,
    });
    assert.equal(first.version, 1);
    const second = await api("PUT", "/v1/agents/triage", {
      description: `Sorts tickets, better ${hostile}`,
      instructions: `Sort the ticket carefully. ${hostile}`,
      model: answer("bug"),
      output_schema: schema,
      limits: { max_steps: 4 },
    });
    assert.equal(second.version, 2);
    await api("POST", "/v1/agents", { name: "old-helper", description: "Retired", instructions: "Help." });
    await api("DELETE", "/v1/agents/old-helper");
    const older = await api("POST", "/v1/runs?wait=true", { prompt: "The app crashes", agent: "triage@1" });
    const run = await api("POST", "/v1/runs?wait=true", { prompt: "The app crashes again", agent: "triage" });
    const other = await api("POST", "/v1/runs?wait=true", { prompt: "no agent here" });

    // The list: the live agents, their latest version and description.
    await page.goto(`${base}/#/agents`);
    const agent = (name) => page.locator(`.agent-item[data-agent="${name}"]`);
    await agent("triage").waitFor({ timeout: WAIT });
    await expectText(agent("triage").locator(".version"), "v2", "the agent's latest version");
    // (An excerpt: the whole of it is the agent's.)
    await expectText(agent("triage").locator(".description"), "Sorts tickets, better <img src=x", "the agent's description, as text");
    assert.equal(await agent("old-helper").count(), 0, "an archived agent is not listed with the live ones");
    // The archived ones, on asking.
    await page.check("#agents-archived");
    await agent("old-helper").waitFor({ timeout: WAIT });
    await expectText(agent("old-helper").locator(".badge"), "archived", "the archived agent's mark");
    await agent("triage").waitFor({ state: "detached", timeout: WAIT });
    await page.uncheck("#agents-archived");
    await agent("triage").waitFor({ timeout: WAIT });

    // An agent: its versions, newest first, each with its definition.
    await agent("triage").locator("a").click();
    await page.waitForURL(/#\/agents\/triage$/, { timeout: WAIT });
    await expectText(page.locator("#agent-title"), "triage", "the open agent");
    await expectText(page.locator("#agent-description"), `Sorts tickets, better ${hostile}`, "the description, as text");
    const version = (n) => page.locator(`#agent-versions .version[data-version="${n}"]`);
    await version(1).waitFor({ timeout: WAIT });
    const numbers = await page.locator("#agent-versions .version").evaluateAll((items) => items.map((item) => Number(item.dataset.version)));
    assert.deepEqual(numbers, [2, 1], "every version, newest first");
    // The latest unfolded, an older one folded until asked for.
    const definition = async (n) => {
      await version(n).locator(".definition").waitFor({ timeout: WAIT });
      return JSON.parse(await version(n).locator(".definition").textContent());
    };
    const latest = await definition(2);
    assert.equal(latest.instructions, `Sort the ticket carefully. ${hostile}`, "the latest definition, as text");
    assert.deepEqual(latest.output_schema, schema, "the definition, as JSON");
    assert.ok(await version(1).locator(".definition").isHidden(), "an older version is folded");
    await version(1).locator("summary").click();
    assert.equal((await definition(1)).instructions, "Sort the ticket.", "the first version's definition");
    await shot("console-agent");

    // Its runs: those of every version, and no other.
    await page.click("#agent-runs");
    await page.waitForURL(/#\/$/, { timeout: WAIT });
    await expectText(page.locator("#agent-filter-name"), "triage", "the list's agent");
    await item(run.id).waitFor({ timeout: WAIT });
    await item(older.id).waitFor({ timeout: WAIT });
    await page.waitForFunction(
      (ids) => [...document.querySelectorAll(".run-item")].map((item) => item.dataset.runId).sort().join() === ids,
      [run.id, older.id].sort().join(),
      { timeout: WAIT },
    );
    await expectText(item(run.id).locator(".agent-tag"), "triage@2", "the run's agent in the list");

    // A run's output, as JSON, and the agent it ran.
    await item(run.id).locator("a").click();
    await expectText(page.locator("#run-status"), "completed", "the agent's run");
    await expectText(page.locator("#run-facts dd"), "triage@2", "the run's agent");
    await page.locator("#run-output").waitFor({ timeout: WAIT });
    const shown = await page.locator("#run-output").textContent();
    assert.equal(shown, JSON.stringify({ label: "bug", note: `sorted ${hostile}` }, null, 2), "the output, pretty-printed");
    await shot("console-output");
    assert.equal(await page.evaluate(() => window.__pwned), undefined, "nothing an agent or a run holds ran as code");
    assert.equal(await page.locator("#detail img, #detail script, #agents img, #agents script").count(), 0);
    // A run without an output schema shows no output; every run again.
    await page.click("#agent-filter-clear");
    await item(other.id).waitFor({ timeout: WAIT });
    await item(other.id).locator("a").click();
    await expectText(page.locator("#run-status"), "completed", "the run without an agent");
    assert.ok(await page.locator("#run-output-box").isHidden(), "no output without a schema");
    // The run's agent links to the agent.
    await page.evaluate((to) => { location.hash = `#/runs/${to}`; }, run.id);
    await page.locator("#run-facts a", { hasText: "triage@2" }).click();
    await page.waitForURL(/#\/agents\/triage$/, { timeout: WAIT });
    await version(2).waitFor({ timeout: WAIT });
    return { agent: "triage", run: run.id, older: older.id, other: other.id };
  },

  // The schedules of the tenant: each with its cron and timezone, its next
  // tick and its newest run (which opens), a disabled one marked; a name
  // is shown as text.
  async schedules() {
    const hostile = '<img src=x onerror="window.__pwned=1">';
    const quick = { prompt: "tick", tools: [], model: scripted([{ content: "ticked" }]) };
    const daily = await api("POST", "/v1/schedules", {
      cron: "0 9 * * 1-5",
      timezone: "Europe/Berlin",
      name: `Morning ${hostile}`,
      run: quick,
    });
    const run = await api("POST", `/v1/schedules/${daily.id}/trigger`);
    const paused = await api("POST", "/v1/schedules", { cron: "*/5 * * * *", run: quick, enabled: false });
    await page.goto(`${base}/#/schedules`);
    const item = (id) => page.locator(`.schedule-item[data-schedule="${id}"]`);
    await item(daily.id).waitFor({ timeout: WAIT });
    await expectText(item(daily.id).locator(".name"), `Morning ${hostile}`, "the schedule's name, as text");
    await expectText(item(daily.id).locator(".cron"), "0 9 * * 1-5 (Europe/Berlin)", "its cron and timezone");
    assert.equal(
      await item(daily.id).locator(".next time").getAttribute("datetime"),
      daily.next_run_at,
      "its next tick",
    );
    await expectText(item(paused.id).locator(".badge"), "disabled", "a disabled schedule's mark");
    await expectText(item(paused.id).locator(".next"), "none", "no next tick while disabled");
    await shot("console-schedules");
    // Its newest run opens.
    await item(daily.id).locator("a.last-run").click();
    await page.waitForURL(new RegExp(`#/runs/${run.id}$`), { timeout: WAIT });
    await expectText(page.locator("#run-title"), run.id, "the schedule's run, open");
    assert.equal(await page.evaluate(() => window.__pwned), undefined, "no markup of the name ran");
    return { schedule: daily.id, run: run.id };
  },

  // A server with tokens: the page asks for one, refuses a wrong one, and
  // keeps the right one in the tab's session storage only.
  async token() {
    const run = await api("POST", "/v1/runs", { prompt: "made with a token" });
    await page.goto(base + "/");
    const dialog = page.locator("#token-dialog");
    await dialog.waitFor({ timeout: WAIT });
    await shot("console-token");
    await page.fill('#token-form input[name="token"]', "not-the-token");
    await page.click('#token-form button[type="submit"]');
    await page.locator("#token-error").filter({ hasText: "refused" }).waitFor({ timeout: WAIT });
    await page.fill('#token-form input[name="token"]', token);
    await page.click('#token-form button[type="submit"]');
    await item(run.id).waitFor({ timeout: WAIT });
    await page.locator("#connection[data-state=open]").waitFor({ timeout: WAIT });
    const stored = await page.evaluate(() => ({ session: sessionStorage.getItem("agent-runner-token"), local: localStorage.length, cookies: document.cookie }));
    assert.deepEqual(stored, { session: token, local: 0, cookies: "" });
    // A reload in the same tab keeps it; the list is read again.
    await page.reload();
    await item(run.id).waitFor({ timeout: WAIT });
    assert.ok(await dialog.isHidden(), "no second ask");
    return { run: run.id };
  },
};

let result;
try {
  assert.ok(scenarios[scenario], `no scenario ${scenario}`);
  result = await scenarios[scenario]();
  assert.ok(streams.most <= 2, `at most two streams at once (saw ${streams.most})`);
  assert.deepEqual(problems, [], "the page raised no errors");
} catch (error) {
  await shot(`console-${scenario}-failed`).catch(() => {});
  console.error(error.stack || String(error));
  await browser.close();
  process.exit(1);
}
await browser.close();
console.log(JSON.stringify({ ...result, streams: streams.most }));
