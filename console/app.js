// The console: the runs of a tenant, live, and one run at a time in detail;
// the tenant's stored agents, and one agent's versions at a time; its
// schedules (schedules.js).
//
// It holds at most two connections to the server: the tenant-wide status
// stream (GET /v1/runs/events), which keeps the list live, and the event
// stream of the open run. Both are read with fetch, so that they carry the
// token as a header. Everything a run produced (prompts, model output, tool
// results, its diff) and everything an agent holds (its description and
// definition) is untrusted text: it is only ever set as text, never as
// markup. A run's changes (its diff, their counts, its archive) are shown by
// diff.js.

import { renderChanges, renderDiff, saveBlob } from "./diff.js";
import { loadSchedules } from "./schedules.js";
import { cost, eventItem, excerpt, messageItem, tokens } from "./events.js";
import { pendingItem } from "./pending.js";
import { loadSubruns } from "./subruns.js";

const TOKEN_KEY = "agent-runner-token";
const LIVE = new Set(["queued", "running", "requires_action"]);
const PAGE = 50;

const state = {
  token: sessionStorage.getItem(TOKEN_KEY),
  runs: new Map(),
  cursor: null,
  filter: "",
  // The name of the agent whose runs the list shows ("": every run's).
  agentFilter: "",
  open: null,
  statusStream: null,
  runStream: null,
  // Which list is shown: "runs", "agents" or "schedules".
  tab: null,
  agents: new Map(),
  agentsCursor: null,
  archived: false,
  // Reads of the agents' list asked for: only the latest one's answer is shown.
  agentReads: 0,
  openAgent: null,
};

const $ = (id) => document.getElementById(id);

/** An element with properties, attributes and children (strings become text). */
function h(tag, props = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") element.className = value;
    else if (key === "dataset") Object.assign(element.dataset, value);
    else if (key.startsWith("on")) element.addEventListener(key.slice(2), value);
    else if (key in element && typeof value !== "string") element[key] = value;
    else element.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

// ------------------------------------------------------------------ the API

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function headers(extra = {}) {
  const all = { ...extra };
  if (state.token) all.Authorization = `Bearer ${state.token}`;
  return all;
}

/** Sends a request: its response when it is a 2xx, else an ApiError (a 401
 *  asks for a token). */
async function request(method, path, body) {
  const init = { method, headers: headers() };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (response.status === 401) {
    askForToken(state.token ? "That token was refused." : null);
    throw new ApiError(401, "unauthorized", "A token is needed.");
  }
  if (!response.ok) {
    let json = null;
    try {
      json = JSON.parse(await response.text());
    } catch {
      // Not JSON: said below.
    }
    const error = json && json.error;
    throw new ApiError(
      response.status,
      error ? error.code : "http_error",
      error ? error.message : `The server answered ${response.status}.`,
    );
  }
  return response;
}

/** Sends a request and answers its JSON body (null for none). */
async function api(method, path, body) {
  const response = await request(method, path, body);
  const text = await response.text();
  try {
    return text ? JSON.parse(text) : null;
  } catch {
    return null;
  }
}

// ---------------------------------------------------- Server-Sent Events

/**
 * A stream of Server-Sent Events read with fetch, reconnecting after a drop
 * (resuming after the last id it saw, where events have ids) until it is
 * stopped, the server answers 204 (nothing more will come), or `onEvent`
 * returns true (the end).
 */
class EventStream {
  constructor(path, { onEvent, onOpen, onState }) {
    this.path = path;
    this.onEvent = onEvent;
    this.onOpen = onOpen || (() => {});
    this.onState = onState || (() => {});
    this.lastId = null;
    this.retry = 1000;
    this.controller = new AbortController();
    this.done = false;
    this.run();
  }

  stop() {
    this.done = true;
    this.controller.abort();
  }

  async run() {
    while (!this.done) {
      try {
        const extra = this.lastId === null ? {} : { "Last-Event-ID": this.lastId };
        const response = await fetch(this.path, {
          headers: headers({ Accept: "text/event-stream", ...extra }),
          signal: this.controller.signal,
          cache: "no-store",
        });
        if (response.status === 204) {
          this.done = true;
          this.onState("ended");
          return;
        }
        if (response.status === 401) {
          this.done = true;
          this.onState("unauthorized");
          askForToken(state.token ? "That token was refused." : null);
          return;
        }
        if (!response.ok || !response.body) {
          throw new Error(`status ${response.status}`);
        }
        this.onState("open");
        await this.onOpen();
        await this.read(response.body);
      } catch (error) {
        if (this.done) return;
        this.onState("retrying");
      }
      if (this.done) return;
      this.onState("retrying");
      await new Promise((resolve) => setTimeout(resolve, this.retry));
    }
  }

  async read(body) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let event = { id: null, type: "message", data: [] };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let newline;
      while ((newline = buffer.search(/\r\n|\r|\n/)) >= 0) {
        const line = buffer.slice(0, newline);
        const width = buffer.startsWith("\r\n", newline) ? 2 : 1;
        buffer = buffer.slice(newline + width);
        if (line === "") {
          if (event.data.length > 0) {
            if (event.id !== null) this.lastId = event.id;
            let data = null;
            try {
              data = JSON.parse(event.data.join("\n"));
            } catch {
              data = null;
            }
            if (data !== null && this.onEvent(event.type, data, event.id)) {
              this.stop();
              this.onState("ended");
              return;
            }
          }
          event = { id: null, type: "message", data: [] };
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let text = colon < 0 ? "" : line.slice(colon + 1);
        if (text.startsWith(" ")) text = text.slice(1);
        if (field === "data") event.data.push(text);
        else if (field === "event") event.type = text;
        else if (field === "id") event.id = text;
        else if (field === "retry" && /^\d+$/.test(text)) this.retry = Number(text);
      }
    }
  }
}

// -------------------------------------------------------------- the list

function showConnection(how) {
  const label = { open: "live", retrying: "reconnecting", unauthorized: "no token", ended: "closed" }[how] || how;
  const element = $("connection");
  element.textContent = label;
  element.dataset.state = how;
}

function watchStatuses() {
  if (state.statusStream) state.statusStream.stop();
  state.statusStream = new EventStream("/v1/runs/events", {
    // Every (re)connection reads the list again: the stream tells only of
    // what changes from now on.
    onOpen: () => loadRuns(),
    onState: showConnection,
    onEvent: (type, change) => {
      if (type === "run_status") statusChanged(change);
      return false;
    },
  });
}

// Runs being read because the stream told of a change to a run not yet
// known: one read each, with the latest change told meanwhile.
const reading = new Map();

async function statusChanged(change) {
  const known = state.runs.get(change.run_id);
  if (known) {
    apply(known, change);
    renderList();
  } else if (reading.has(change.run_id)) {
    reading.set(change.run_id, change);
  } else {
    reading.set(change.run_id, change);
    try {
      const run = await api("GET", `/v1/runs/${change.run_id}`);
      remember(run);
      apply(state.runs.get(run.id), reading.get(change.run_id));
      renderList();
    } catch {
      // Gone or not readable: the next read of the list says.
    } finally {
      reading.delete(change.run_id);
    }
  }
  if (state.open && state.open.id === change.run_id) refreshOpenRun();
}

/** A change the stream told of, unless what is shown is newer. */
function apply(run, change) {
  const at = Date.parse(change.at);
  if (goesBack(run.status, change.status) || (run.status_at && at < run.status_at)) return;
  run.status = change.status;
  run.status_at = at;
}

/** Whether going from status `from` to `to` would be going back in time: a
 *  terminal status is never followed by another (what said so is older). */
function goesBack(from, to) {
  return !LIVE.has(from) && from !== to;
}

/** Keeps a run as read from the server (a read that crossed a change of
 *  status the stream told of keeps the later status). */
function remember(run) {
  const known = state.runs.get(run.id);
  const kept = { ...run, status_at: known ? known.status_at : null };
  if (known && goesBack(known.status, run.status)) kept.status = known.status;
  state.runs.set(run.id, kept);
  return kept;
}

async function loadRuns(more = false) {
  const query = new URLSearchParams({ limit: String(PAGE) });
  if (state.filter) query.set("status", state.filter);
  if (state.agentFilter) query.set("agent", state.agentFilter);
  if (more && state.cursor) query.set("cursor", state.cursor);
  const filters = `${state.filter} ${state.agentFilter}`;
  try {
    const page = await api("GET", `/v1/runs?${query}`);
    for (const run of page.runs) remember(run);
    // The filters changed meanwhile: the next page is that of another list.
    if (filters === `${state.filter} ${state.agentFilter}`) {
      state.cursor = page.next_cursor || null;
      $("more").hidden = !state.cursor;
    }
    renderList();
  } catch (error) {
    if (error.status !== 401) showListError(error.message);
  }
}

function showListError(message) {
  $("runs-empty").hidden = false;
  $("runs-empty").textContent = `Cannot read the runs: ${message}`;
}

/** Whether a run is one the list shows, with its filters. */
function shown(run) {
  if (state.filter && run.status !== state.filter) return false;
  return !state.agentFilter || (run.agent && run.agent.name === state.agentFilter);
}

function renderList() {
  const list = $("run-list");
  const runs = [...state.runs.values()]
    .filter(shown)
    // Ids are UUID v7: in the order the runs were created.
    .sort((a, b) => (a.id < b.id ? 1 : a.id > b.id ? -1 : 0));
  list.replaceChildren(
    ...runs.map((run) =>
      h(
        "li",
        { class: run.id === (state.open && state.open.id) ? "run-item selected" : "run-item", dataset: { runId: run.id, status: run.status } },
        h(
          "a",
          { href: `#/runs/${run.id}` },
          h("span", { class: `status ${run.status}` }, run.status),
          h("span", { class: "prompt" }, excerpt(run.prompt, 90)),
          h("span", { class: "when" }, when(run.created_at), run.agent ? h("span", { class: "agent-tag" }, agentLabel(run.agent)) : null),
        ),
      ),
    ),
  );
  $("runs-empty").hidden = runs.length > 0;
  if (runs.length === 0) {
    const of = state.agentFilter ? ` of agent ${state.agentFilter}` : "";
    $("runs-empty").textContent = state.filter ? `No ${state.filter} runs${of}.` : of ? `No runs${of}.` : "No runs yet.";
  }
}

/** `name@version`, how a run names the agent it ran. */
function agentLabel(agent) {
  return `${agent.name}@${agent.version}`;
}

/** Shows the runs of one agent (any version), or every run's with "". */
function filterByAgent(name) {
  state.agentFilter = name;
  state.cursor = null;
  $("agent-filter").hidden = !name;
  $("agent-filter-name").textContent = name;
  renderList();
  loadRuns();
}

function when(time) {
  if (!time) return "";
  const date = new Date(time);
  return date.toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" });
}

// ------------------------------------------------------------ one run

// #/runs/ID opens a run, #/agents the list of agents, #/agents/NAME an
// agent, #/schedules the list of schedules; anything else shows the runs.
function route() {
  const run = location.hash.match(/^#\/runs\/([0-9a-fA-F-]{36})$/);
  const agent = location.hash.match(/^#\/agents\/([a-z0-9][a-z0-9_-]{0,63})$/);
  const tab = /^#\/agents(\/|$)/.test(location.hash)
    ? "agents"
    : /^#\/schedules$/.test(location.hash)
      ? "schedules"
      : "runs";
  showTab(tab);
  if (run) {
    closeAgent();
    openRun(run[1].toLowerCase());
  } else if (agent) {
    closeRun();
    openAgent(agent[1]);
  } else {
    closeRun();
    closeAgent();
  }
}

/** Shows one of the detail pane's views: "empty", "run" or "agent". */
function showDetail(view) {
  $("detail-empty").hidden = view !== "empty";
  $("run").hidden = view !== "run";
  $("agent").hidden = view !== "agent";
}

function closeRun() {
  if (state.runStream) state.runStream.stop();
  state.runStream = null;
  state.open = null;
  if (!state.openAgent) showDetail("empty");
  renderList();
}

async function openRun(id) {
  if (state.open && state.open.id === id) return;
  if (state.runStream) state.runStream.stop();
  state.runStream = null;
  const open = { id, run: null, delta: null, refreshes: 0, diff: { loading: false, again: false }, attempts: new Map() };
  state.open = open;
  showDetail("run");
  $("transcript").replaceChildren();
  $("events").replaceChildren();
  $("pending").hidden = true;
  $("run-error").hidden = true;
  $("run-output-box").hidden = true;
  $("diff").replaceChildren();
  $("attempts").hidden = true;
  $("attempts-grid").replaceChildren();
  $("subruns").hidden = true;
  $("subruns-list").replaceChildren();
  $("changes-error").hidden = true;
  renderChanges($("changes-counts"), null);
  $("run-title").textContent = `Run ${id}`;
  renderList();
  let run;
  try {
    run = await api("GET", `/v1/runs/${id}`);
  } catch (error) {
    if (state.open === open) showRunError(error.status === 404 ? "There is no such run." : error.message);
    return;
  }
  // Another run was opened meanwhile.
  if (state.open !== open) return;
  renderRun(remember(run));
  loadDiff(open);
  if (state.runStream) state.runStream.stop();
  state.runStream = new EventStream(`/v1/runs/${id}/events`, {
    onEvent: (type, event) => {
      if (state.open !== open) return true;
      showEvent(event);
      return type === "run_end";
    },
  });
}

async function refreshOpenRun() {
  const open = state.open;
  if (!open) return;
  // Answers may come out of order: only the latest asked for is shown.
  open.refreshes += 1;
  const asked = open.refreshes;
  try {
    const run = await api("GET", `/v1/runs/${open.id}`);
    if (state.open !== open || open.refreshes !== asked) return;
    renderRun(remember(run));
    renderList();
  } catch {
    // The stream goes on; the next change tries again.
  }
}

function showRunError(message) {
  const element = $("run-error");
  element.textContent = message;
  element.hidden = false;
}

function renderRun(run) {
  state.open.run = run;
  const status = $("run-status");
  status.textContent = run.status;
  status.className = `status ${run.status}`;
  $("cancel").hidden = !LIVE.has(run.status);
  const facts = [
    ["Model", [run.model.profile, run.model.provider].filter(Boolean).join(" · ")],
    ["Steps", `${run.steps} / ${run.limits.max_steps}`],
    ["Tool calls", `${run.tool_calls} / ${run.limits.max_tool_calls}`],
    ["Tokens", tokens(run.usage)],
    ["Cost", cost(run.usage.cost_usd, run.limits.max_cost_usd)],
    ["Tools", run.tools.join(", ") || "none"],
    ["Created", when(run.created_at)],
    ["Finished", when(run.finished_at)],
  ];
  const list = [];
  for (const [name, value] of facts) {
    if (!value) continue;
    list.push(h("dt", {}, name), h("dd", {}, value));
  }
  if (run.agent) {
    list.push(h("dt", {}, "Agent"), h("dd", {}, h("a", { href: `#/agents/${encodeURIComponent(run.agent.name)}` }, agentLabel(run.agent))));
  }
  if (run.previous_run_id) {
    list.push(h("dt", {}, "Continues"), h("dd", {}, h("a", { href: `#/runs/${run.previous_run_id}` }, run.previous_run_id)));
  }
  if (run.parent_run_id) {
    const of = run.root_run_id ? "Delegated by" : `Attempt ${run.attempt} of`;
    list.push(h("dt", {}, of), h("dd", {}, h("a", { href: `#/runs/${run.parent_run_id}` }, run.parent_run_id)));
  }
  if (run.usage_total) list.push(h("dt", {}, "With sub-agents"), h("dd", {}, tokens(run.usage_total)));
  $("run-facts").replaceChildren(...list);
  if (run.error) showRunError(run.error);
  else $("run-error").hidden = true;
  // The parsed document of a run with an output schema (null otherwise, and
  // until it completes).
  const hasOutput = run.output !== null && run.output !== undefined;
  $("run-output-box").hidden = !hasOutput;
  $("run-output").textContent = hasOutput ? JSON.stringify(run.output, null, 2) : "";
  // The counts of its diff, once it has ended.
  renderChanges($("changes-counts"), run.changes);
  renderAttempts(run);
  renderPending(run);
}

/** The open run's sub-agents' runs, as a tree (read again on its news). */
function showSubruns(open) {
  if (state.open !== open) return;
  loadSubruns({ api, h, id: open.id, section: $("subruns"), list: $("subruns-list") });
}

/**
 * A run of attempts: each attempt side by side, its status, whether its
 * checks passed, the chosen one marked, and its diff (read again whenever
 * its status changed).
 */
function renderAttempts(run) {
  const section = $("attempts");
  const attempts = run.attempts || [];
  section.hidden = attempts.length === 0;
  const open = state.open;
  const grid = $("attempts-grid");
  for (const attempt of attempts) {
    let card = open.attempts.get(attempt.run_id);
    if (!card) {
      const diff = h("div", { class: "diff-box" });
      const element = h("article", { class: "attempt", "data-attempt": String(attempt.attempt) });
      card = { element, diff, status: null };
      open.attempts.set(attempt.run_id, card);
      grid.append(element);
    }
    const checks = attempt.checks_passed === null ? "checks pending" : attempt.checks_passed ? "checks passed" : "checks failed";
    const checksClass = attempt.checks_passed === null ? "" : attempt.checks_passed ? "passed" : "failed";
    const chosen = run.chosen_attempt === attempt.attempt;
    card.element.className = chosen ? "attempt chosen" : "attempt";
    card.element.replaceChildren(
      h(
        "div",
        { class: "attempt-head" },
        h("a", { href: `#/runs/${attempt.run_id}` }, `Attempt ${attempt.attempt}`),
        h("span", { class: `status ${attempt.status}` }, attempt.status),
        h("span", { class: `attempt-checks ${checksClass}` }, checks),
        chosen && h("strong", { class: "attempt-chosen" }, "chosen"),
      ),
      card.diff,
    );
    if (card.status !== attempt.status) {
      card.status = attempt.status;
      loadAttemptDiff(open, attempt.run_id, card);
    }
  }
}

async function loadAttemptDiff(open, id, card) {
  let text;
  try {
    text = await (await request("GET", `/v1/runs/${id}/diff`)).text();
  } catch (error) {
    if (state.open === open) card.diff.textContent = `Cannot read the diff: ${error.message}`;
    return;
  }
  if (state.open === open) renderDiff(card.diff, text);
}

/**
 * Reads the open run's diff and shows it. Asked again while a read is on
 * its way (a tool ended meanwhile), it reads once more after that one:
 * what is shown is never older than the last ask.
 */
async function loadDiff(open) {
  if (open.diff.loading) {
    open.diff.again = true;
    return;
  }
  open.diff.loading = true;
  try {
    do {
      open.diff.again = false;
      let text;
      try {
        text = await (await request("GET", `/v1/runs/${open.id}/diff`)).text();
      } catch (error) {
        if (state.open === open && error.status !== 401) showChangesError(`Cannot read the diff: ${error.message}`);
        continue;
      }
      if (state.open !== open) return;
      $("changes-error").hidden = true;
      renderDiff($("diff"), text);
    } while (open.diff.again && state.open === open);
  } finally {
    open.diff.loading = false;
  }
}

function showChangesError(message) {
  const element = $("changes-error");
  element.textContent = message;
  element.hidden = false;
}

/** Has the browser save the open run's workspace, as a .tar.gz (read with
 *  the token, which a plain link could not send). */
async function downloadArchive() {
  const open = state.open;
  if (!open) return;
  const button = $("download-archive");
  button.disabled = true;
  try {
    const response = await request("GET", `/v1/runs/${open.id}/archive`);
    saveBlob(await response.blob(), `${open.id}.tar.gz`);
    if (state.open === open) $("changes-error").hidden = true;
  } catch (error) {
    if (state.open === open && error.status !== 401) showChangesError(`Cannot download the workspace: ${error.message}`);
  } finally {
    button.disabled = false;
  }
}

/** Shows the open run's pending actions. An action already shown keeps its
 *  item, so a read of the run while someone edits an answer loses nothing
 *  they typed; answered actions go, new ones come. */
function renderPending(run) {
  const pending = run.status === "requires_action" ? run.pending_actions : [];
  $("pending").hidden = pending.length === 0;
  const answered = (made) => showAnswered(run.id, made);
  // The pause's own: a later pause that asks again under the same call id
  // (answered elsewhere meanwhile) gets a fresh item.
  const key = (action) => JSON.stringify([run.id, action.run_id ?? "", action.call_id, action.arguments]);
  const list = $("pending-list");
  const shown = new Map([...list.children].map((item) => [item.dataset.key, item]));
  const items = pending.map((action) => {
    const kept = shown.get(key(action));
    const item = kept && !kept.dataset.answered ? kept : pendingItem({ api, h, run, action, answered });
    item.dataset.key = key(action);
    return item;
  });
  // Changed in place: an item kept where it was keeps the focus and the
  // caret of someone typing in it.
  for (const item of [...list.children]) if (!items.includes(item)) item.remove();
  items.forEach((item, index) => {
    if (list.children[index] !== item) list.insertBefore(item, list.children[index] ?? null);
  });
}

/** Shows the run an answer made, newer than any read still on its way. */
function showAnswered(id, answered) {
  const kept = remember(answered);
  if (state.open && state.open.id === id) {
    state.open.refreshes += 1;
    renderRun(kept);
  }
  renderList();
}

function showEvent(event) {
  const open = state.open;
  if (event.type === "model_delta") {
    if (!open.delta) {
      open.delta = h("li", { class: "message assistant streaming" }, h("span", { class: "role" }, "assistant"), h("div", { class: "content" }));
      $("transcript").append(open.delta);
    }
    open.delta.querySelector(".content").append(event.text);
    return;
  }
  $("events").append(eventItem(h, event));
  if (event.type === "message") {
    if (open.delta) {
      open.delta.remove();
      open.delta = null;
    }
    $("transcript").append(messageItem(h, event.message));
  }
  if (["run_start", "actions_required", "run_end", "tool_end", "attempt_start", "attempt_end", "subrun_start", "subrun_end"].includes(event.type)) {
    refreshOpenRun();
  }
  if (event.type === "run_start" || event.type === "subrun_start" || event.type === "subrun_end") showSubruns(open);
  // A tool may have changed the workspace.
  if (event.type === "tool_end" || event.type === "run_end") loadDiff(open);
}

// ------------------------------------------------------------- agents

/** Shows one of the lists: "runs", "agents" or "schedules" (the last two
 *  read again on each showing: no stream tells of them). */
function showTab(tab) {
  const changed = state.tab !== tab;
  state.tab = tab;
  $("runs").hidden = tab !== "runs";
  $("agents").hidden = tab !== "agents";
  $("schedules").hidden = tab !== "schedules";
  for (const [id, name] of [
    ["tab-runs", "runs"],
    ["tab-agents", "agents"],
    ["tab-schedules", "schedules"],
  ]) {
    const link = $(id);
    link.classList.toggle("selected", name === tab);
    if (name === tab) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (changed && tab === "agents") loadAgents();
  if (changed && tab === "schedules") showSchedules();
}

function showSchedules() {
  loadSchedules({ api, h, when, list: $("schedule-list"), empty: $("schedules-empty") });
}

async function loadAgents(more = false) {
  const query = new URLSearchParams({ limit: String(PAGE) });
  if (state.archived) query.set("archived", "true");
  if (more && state.agentsCursor) query.set("cursor", state.agentsCursor);
  // Answers may come out of order (the archived box ticked meanwhile): only
  // the latest asked for is shown.
  state.agentReads += 1;
  const asked = state.agentReads;
  try {
    const page = await api("GET", `/v1/agents?${query}`);
    if (asked !== state.agentReads) return;
    if (!more) state.agents.clear();
    for (const agent of page.agents) state.agents.set(agent.name, agent);
    state.agentsCursor = page.next_cursor || null;
    $("agents-more").hidden = !state.agentsCursor;
    renderAgents();
  } catch (error) {
    if (asked === state.agentReads && error.status !== 401) {
      $("agents-empty").hidden = false;
      $("agents-empty").textContent = `Cannot read the agents: ${error.message}`;
    }
  }
}

function renderAgents() {
  const open = state.openAgent && state.openAgent.name;
  const agents = [...state.agents.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  $("agent-list").replaceChildren(
    ...agents.map((agent) =>
      h(
        "li",
        { class: agent.name === open ? "agent-item selected" : "agent-item", dataset: { agent: agent.name, archived: String(agent.archived) } },
        h(
          "a",
          { href: `#/agents/${encodeURIComponent(agent.name)}` },
          h("span", { class: "name" }, agent.name),
          h("span", { class: "version" }, `v${agent.version}`),
          agent.archived ? h("span", { class: "badge archived" }, "archived") : null,
          agent.description ? h("span", { class: "description" }, excerpt(agent.description, 90)) : null,
        ),
      ),
    ),
  );
  $("agents-empty").hidden = agents.length > 0;
  if (agents.length === 0) $("agents-empty").textContent = state.archived ? "No archived agents." : "No agents yet.";
}

function closeAgent() {
  state.openAgent = null;
  if (!state.open) showDetail("empty");
  renderAgents();
}

async function openAgent(name) {
  if (state.openAgent && state.openAgent.name === name) return;
  const open = { name, latest: null, cursor: null };
  state.openAgent = open;
  showDetail("agent");
  $("agent-title").textContent = `Agent ${name}`;
  $("agent-archived").hidden = true;
  $("agent-description").hidden = true;
  $("agent-facts").replaceChildren();
  $("agent-versions").replaceChildren();
  $("agent-more-versions").hidden = true;
  $("agent-error").hidden = true;
  renderAgents();
  let agent;
  try {
    agent = await api("GET", `/v1/agents/${encodeURIComponent(name)}`);
  } catch (error) {
    if (state.openAgent === open && error.status !== 401) {
      showAgentError(error.status === 404 ? "There is no such agent." : error.message);
    }
    return;
  }
  // Another agent was opened meanwhile.
  if (state.openAgent !== open) return;
  renderAgent(agent);
  await loadVersions(open);
}

function showAgentError(message) {
  const element = $("agent-error");
  element.textContent = message;
  element.hidden = false;
}

/** The agent as it is now: its latest version. */
function renderAgent(agent) {
  state.openAgent.latest = agent.version;
  $("agent-archived").hidden = !agent.archived;
  $("agent-description").textContent = agent.description || "";
  $("agent-description").hidden = !agent.description;
  const facts = [
    ["Latest version", String(agent.version)],
    ["Since", when(agent.created_at)],
  ];
  $("agent-facts").replaceChildren(...facts.flatMap(([name, value]) => [h("dt", {}, name), h("dd", {}, value)]));
  if (state.agents.has(agent.name)) {
    state.agents.set(agent.name, agent);
    renderAgents();
  }
}

/** The next page of the open agent's versions, newest first. */
async function loadVersions(open) {
  const query = new URLSearchParams({ limit: String(PAGE) });
  if (open.cursor) query.set("cursor", open.cursor);
  const more = $("agent-more-versions");
  more.disabled = true;
  try {
    const page = await api("GET", `/v1/agents/${encodeURIComponent(open.name)}/versions?${query}`);
    if (state.openAgent !== open) return;
    $("agent-versions").append(...page.versions.map((version) => versionItem(open, version)));
    open.cursor = page.next_cursor || null;
    more.hidden = !open.cursor;
  } catch (error) {
    if (state.openAgent === open && error.status !== 401) showAgentError(error.message);
  } finally {
    more.disabled = false;
  }
}

/** One version: its number and when it was made, and (unfolded for the
 *  latest) its description and its definition as JSON. */
function versionItem(open, version) {
  const latest = version.version === open.latest;
  return h(
    "li",
    { class: "version", dataset: { version: version.version } },
    h(
      "details",
      { open: latest },
      h(
        "summary",
        {},
        h("strong", {}, `Version ${version.version}`),
        h("span", { class: "when" }, when(version.created_at)),
        latest ? h("span", { class: "badge" }, "latest") : null,
      ),
      version.description ? h("p", { class: "description" }, version.description) : null,
      h("pre", { class: "json definition" }, JSON.stringify(version.definition, null, 2)),
    ),
  );
}

// ----------------------------------------------------------- creating

async function showCreate() {
  const select = $("create").elements.profile;
  if (select.options.length === 0) {
    try {
      const { models } = await api("GET", "/v1/models");
      select.replaceChildren(...models.map((model) => h("option", { value: model.name }, `${model.name} (${model.kind})`)));
    } catch (error) {
      if (error.status === 401) return;
    }
  }
  $("create-error").hidden = true;
  $("create-dialog").showModal();
  $("create").elements.prompt.focus();
}

async function create(event) {
  event.preventDefault();
  const form = $("create");
  const data = new FormData(form);
  const body = { prompt: data.get("prompt") };
  if (data.get("profile")) body.model = { profile: data.get("profile") };
  const instructions = (data.get("instructions") || "").trim();
  if (instructions) body.instructions = instructions;
  body.tools = data.getAll("tool");
  const approve = data.getAll("approve").filter((name) => body.tools.includes(name));
  if (approve.length > 0) body.approval = { tools: approve };
  $("create-submit").disabled = true;
  try {
    const run = await api("POST", "/v1/runs", body);
    remember(run);
    renderList();
    $("create-dialog").close();
    form.elements.prompt.value = "";
    location.hash = `#/runs/${run.id}`;
  } catch (error) {
    if (error.status !== 401) {
      $("create-error").textContent = error.message;
      $("create-error").hidden = false;
    }
  } finally {
    $("create-submit").disabled = false;
  }
}

// -------------------------------------------------------------- tokens

function askForToken(problem) {
  const dialog = $("token-dialog");
  $("token-error").hidden = !problem;
  $("token-error").textContent = problem || "";
  if (!dialog.open) dialog.showModal();
}

function useToken(event) {
  event.preventDefault();
  const value = $("token-form").elements.token.value.trim();
  if (!value) return;
  state.token = value;
  sessionStorage.setItem(TOKEN_KEY, value);
  $("token-form").elements.token.value = "";
  $("token-dialog").close();
  $("sign-out").hidden = false;
  start();
}

function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  location.reload();
}

// --------------------------------------------------------------- start

function start() {
  state.runs.clear();
  state.open = null;
  state.openAgent = null;
  // Shown afresh (the agents' list read again) by the route.
  state.tab = null;
  watchStatuses();
  route();
}

$("filter").addEventListener("change", (event) => {
  state.filter = event.target.value;
  state.cursor = null;
  renderList();
  loadRuns();
});
$("more").addEventListener("click", () => loadRuns(true));
$("agent-filter-clear").addEventListener("click", () => filterByAgent(""));
$("agents-archived").addEventListener("change", (event) => {
  state.archived = event.target.checked;
  state.agents.clear();
  state.agentsCursor = null;
  $("agent-list").replaceChildren();
  $("agents-empty").hidden = true;
  $("agents-more").hidden = true;
  loadAgents();
});
$("agents-more").addEventListener("click", () => loadAgents(true));
// The tab of the list already shown reads it again.
$("tab-agents").addEventListener("click", () => {
  if (state.tab === "agents") loadAgents();
});
$("tab-schedules").addEventListener("click", () => {
  if (state.tab === "schedules") showSchedules();
});
$("agent-more-versions").addEventListener("click", () => {
  if (state.openAgent) loadVersions(state.openAgent);
});
$("agent-runs").addEventListener("click", () => {
  const open = state.openAgent;
  if (!open) return;
  filterByAgent(open.name);
  location.hash = "#/";
});
$("new-run").addEventListener("click", showCreate);
$("create").addEventListener("submit", create);
$("create-cancel").addEventListener("click", () => $("create-dialog").close());
$("token-form").addEventListener("submit", useToken);
$("sign-out").addEventListener("click", forgetToken);
$("sign-out").hidden = !state.token;
$("download-archive").addEventListener("click", downloadArchive);
$("cancel").addEventListener("click", async () => {
  const open = state.open;
  if (!open) return;
  $("cancel").disabled = true;
  try {
    await api("DELETE", `/v1/runs/${open.id}`);
  } catch (error) {
    if (error.status !== 401) showRunError(error.message);
  } finally {
    $("cancel").disabled = false;
  }
});
window.addEventListener("hashchange", route);
start();
