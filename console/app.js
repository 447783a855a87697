// The console: the runs of a tenant, live, and one run at a time in detail.
//
// It holds at most two connections to the server: the tenant-wide status
// stream (GET /v1/runs/events), which keeps the list live, and the event
// stream of the open run. Both are read with fetch, so that they carry the
// token as a header. Everything a run produced (prompts, model output, tool
// results) is untrusted text: it is only ever set as text, never as markup.

const TOKEN_KEY = "agent-runner-token";
const LIVE = new Set(["queued", "running", "requires_action"]);
const PAGE = 50;

const state = {
  token: sessionStorage.getItem(TOKEN_KEY),
  runs: new Map(),
  cursor: null,
  filter: "",
  open: null,
  statusStream: null,
  runStream: null,
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

async function api(method, path, body) {
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
  const text = await response.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    // Not JSON: said below.
  }
  if (!response.ok) {
    const error = json && json.error;
    throw new ApiError(
      response.status,
      error ? error.code : "http_error",
      error ? error.message : `The server answered ${response.status}.`,
    );
  }
  return json;
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
  if (more && state.cursor) query.set("cursor", state.cursor);
  try {
    const page = await api("GET", `/v1/runs?${query}`);
    for (const run of page.runs) remember(run);
    state.cursor = page.next_cursor || null;
    $("more").hidden = !state.cursor;
    renderList();
  } catch (error) {
    if (error.status !== 401) showListError(error.message);
  }
}

function showListError(message) {
  $("runs-empty").hidden = false;
  $("runs-empty").textContent = `Cannot read the runs: ${message}`;
}

function renderList() {
  const list = $("run-list");
  const runs = [...state.runs.values()]
    .filter((run) => !state.filter || run.status === state.filter)
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
          h("span", { class: "when" }, when(run.created_at)),
        ),
      ),
    ),
  );
  $("runs-empty").hidden = runs.length > 0;
  if (runs.length === 0) $("runs-empty").textContent = state.filter ? `No ${state.filter} runs.` : "No runs yet.";
}

function excerpt(text, length) {
  const line = (text || "").replace(/\s+/g, " ").trim();
  return line.length > length ? `${line.slice(0, length - 1)}…` : line;
}

function when(time) {
  if (!time) return "";
  const date = new Date(time);
  return date.toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" });
}

// ------------------------------------------------------------ one run

function route() {
  const match = location.hash.match(/^#\/runs\/([0-9a-fA-F-]{36})$/);
  if (match) openRun(match[1].toLowerCase());
  else closeRun();
}

function closeRun() {
  if (state.runStream) state.runStream.stop();
  state.runStream = null;
  state.open = null;
  $("run").hidden = true;
  $("detail-empty").hidden = false;
  renderList();
}

async function openRun(id) {
  if (state.open && state.open.id === id) return;
  if (state.runStream) state.runStream.stop();
  state.runStream = null;
  const open = { id, run: null, delta: null, refreshes: 0 };
  state.open = open;
  $("detail-empty").hidden = true;
  $("run").hidden = false;
  $("transcript").replaceChildren();
  $("events").replaceChildren();
  $("pending").hidden = true;
  $("run-error").hidden = true;
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
    ["Tokens", `${run.usage.input_tokens} in, ${run.usage.output_tokens} out`],
    ["Tools", run.tools.join(", ") || "none"],
    ["Created", when(run.created_at)],
    ["Finished", when(run.finished_at)],
  ];
  const list = [];
  for (const [name, value] of facts) {
    if (!value) continue;
    list.push(h("dt", {}, name), h("dd", {}, value));
  }
  if (run.previous_run_id) {
    list.push(h("dt", {}, "Continues"), h("dd", {}, h("a", { href: `#/runs/${run.previous_run_id}` }, run.previous_run_id)));
  }
  $("run-facts").replaceChildren(...list);
  if (run.error) showRunError(run.error);
  else $("run-error").hidden = true;
  renderPending(run);
}

function renderPending(run) {
  const pending = run.status === "requires_action" ? run.pending_actions : [];
  $("pending").hidden = pending.length === 0;
  $("pending-list").replaceChildren(...pending.map((action) => pendingItem(run, action)));
}

function pendingItem(run, action) {
  const problem = h("p", { class: "error", hidden: true });
  const send = async (answer, buttons) => {
    for (const button of buttons) button.disabled = true;
    problem.hidden = true;
    try {
      const answered = await api("POST", `/v1/runs/${run.id}/actions`, { actions: [{ call_id: action.call_id, ...answer }] });
      const kept = remember(answered);
      if (state.open && state.open.id === run.id) {
        // Newer than any read still on its way.
        state.open.refreshes += 1;
        renderRun(kept);
      }
      renderList();
    } catch (error) {
      problem.textContent = error.message;
      problem.hidden = false;
      for (const button of buttons) button.disabled = false;
    }
  };
  const head = h(
    "div",
    { class: "pending-head" },
    h("strong", {}, action.name),
    h("span", { class: "kind" }, action.kind === "approval" ? "asks for approval" : "runs on your side"),
  );
  const args = h("pre", { class: "arguments" }, JSON.stringify(action.arguments, null, 2));
  let controls;
  if (action.kind === "approval") {
    const reason = h("input", { type: "text", placeholder: "reason (for a denial)", "aria-label": "Reason" });
    const approve = h("button", { type: "button", class: "approve" }, "Approve");
    const deny = h("button", { type: "button", class: "danger" }, "Deny");
    approve.addEventListener("click", () => send({ decision: "approve" }, [approve, deny]));
    deny.addEventListener("click", () => {
      const answer = { decision: "deny" };
      if (reason.value.trim()) answer.reason = reason.value.trim();
      send(answer, [approve, deny]);
    });
    controls = h("div", { class: "controls" }, approve, deny, reason);
  } else {
    const output = h("textarea", { rows: 3, placeholder: "output: JSON, or plain text", "aria-label": "Output" });
    const give = h("button", { type: "button", class: "approve" }, "Send output");
    const fail = h("button", { type: "button", class: "danger" }, "Send as error");
    give.addEventListener("click", () => {
      let value = output.value;
      try {
        value = JSON.parse(output.value);
      } catch {
        // Plain text is sent as a string.
      }
      send({ output: value }, [give, fail]);
    });
    fail.addEventListener("click", () => send({ error: output.value || "failed" }, [give, fail]));
    controls = h("div", { class: "controls" }, output, give, fail);
  }
  return h("li", { class: "pending-item", dataset: { callId: action.call_id } }, head, args, controls, problem);
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
  $("events").append(eventItem(event));
  if (event.type === "message") {
    if (open.delta) {
      open.delta.remove();
      open.delta = null;
    }
    $("transcript").append(messageItem(event.message));
  }
  if (["run_start", "actions_required", "run_end", "tool_end"].includes(event.type)) {
    refreshOpenRun();
  }
}

function eventItem(event) {
  let detail = "";
  switch (event.type) {
    case "tool_start":
      detail = event.name;
      break;
    case "tool_end":
      detail = `${event.name}${event.is_error ? " (error)" : ""} · ${event.duration_ms} ms`;
      break;
    case "model_end":
      detail = event.usage ? `${event.usage.input_tokens} in, ${event.usage.output_tokens} out` : "";
      break;
    case "model_error":
      detail = event.error || "";
      break;
    case "actions_required":
      detail = (event.actions || []).map((action) => action.name).join(", ");
      break;
    case "run_end":
      detail = event.status;
      break;
    case "message":
      detail = event.message.role;
      break;
    default:
      detail = "";
  }
  return h(
    "li",
    { class: `event type-${event.type}`, dataset: { sequence: event.sequence } },
    h("span", { class: "sequence" }, event.sequence),
    h("span", { class: "type" }, event.type),
    h("span", { class: "summary" }, excerpt(String(detail), 120)),
  );
}

function messageItem(message) {
  const parts = [h("span", { class: "role" }, message.role === "tool" ? `tool ${message.call_id}` : message.role)];
  if (message.content) parts.push(h("div", { class: "content" }, message.content));
  for (const call of message.tool_calls || []) {
    parts.push(h("div", { class: "call" }, `→ ${call.name}(${JSON.stringify(call.arguments)})`));
  }
  const kind = message.role === "tool" && message.is_error ? "message tool error" : `message ${message.role}`;
  return h("li", { class: kind }, parts);
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
$("new-run").addEventListener("click", showCreate);
$("create").addEventListener("submit", create);
$("create-cancel").addEventListener("click", () => $("create-dialog").close());
$("token-form").addEventListener("submit", useToken);
$("sign-out").addEventListener("click", forgetToken);
$("sign-out").hidden = !state.token;
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
