// How the console shows a run's events and its transcript's messages, and
// the figures both use (tokens, cost, a line of text cut short). Everything
// shown is untrusted text: only ever set as text. `h` makes elements.

export function excerpt(text, length) {
  const line = (text || "").replace(/\s+/g, " ").trim();
  return line.length > length ? `${line.slice(0, length - 1)}…` : line;
}

// "1200 in (1000 cached, 100 written to the cache), 10 out".
export function tokens(usage) {
  const cache = [];
  if (usage.cached_input_tokens) cache.push(`${usage.cached_input_tokens} cached`);
  if (usage.cache_write_tokens) cache.push(`${usage.cache_write_tokens} written to the cache`);
  const input = `${usage.input_tokens ?? 0} in${cache.length ? ` (${cache.join(", ")})` : ""}`;
  return `${input}, ${usage.output_tokens ?? 0} out`;
}

// "$0.0123" (of "$1" when bounded); nothing when the cost is unknown.
export function cost(usd, max) {
  if (usd === null || usd === undefined) return "";
  const spent = `$${usd < 1 ? usd.toPrecision(3) : usd.toFixed(2)}`;
  return max ? `${spent} of $${max}` : spent;
}

export function eventItem(h, event) {
  let detail = "";
  switch (event.type) {
    case "tool_start":
      detail = event.edited ? `${event.name} · arguments edited: ${JSON.stringify(event.arguments)}` : event.name;
      break;
    case "tool_end":
      detail = `${event.name}${event.is_error ? " (error)" : ""} · ${event.duration_ms} ms`;
      break;
    case "model_end":
      detail = [event.profile && `answered by ${event.profile}`, event.usage && tokens(event.usage), event.usage && cost(event.usage.cost_usd)]
        .filter(Boolean)
        .join(" · ");
      break;
    case "model_fallback":
      detail = `${event.from} → ${event.to} · ${event.reason}`;
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
    case "compaction":
      detail = event.fallback
        ? `summary failed: ${event.fallback} instead`
        : `${event.replaced_messages} messages summarised · ${event.before_chars} → ${event.after_chars} chars`;
      break;
    case "attempt_start":
      detail = `attempt ${event.attempt}`;
      break;
    case "attempt_end":
      detail = `attempt ${event.attempt} ${event.status} · checks ${event.checks_passed ? "passed" : "failed"}`;
      break;
    case "subrun_start":
      detail = `${event.agent} · ${event.run_id}`;
      break;
    case "subrun_end":
      detail = `${event.status} · ${event.run_id}`;
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

export function messageItem(h, message) {
  const role = message.role === "tool" ? `tool ${message.call_id}`
    : message.role === "summary" ? `summary of the first ${message.replaces} messages` : message.role;
  const parts = [h("span", { class: "role" }, role)];
  if (message.edited) {
    parts.push(h("div", { class: "edited" }, `arguments edited by a reviewer: ${JSON.stringify(message.arguments)}`));
  }
  if (message.content) parts.push(h("div", { class: "content" }, message.content));
  for (const call of message.tool_calls || []) {
    parts.push(h("div", { class: "call" }, `→ ${call.name}(${JSON.stringify(call.arguments)})`));
  }
  const kind = message.role === "tool" && message.is_error ? "message tool error" : `message ${message.role}`;
  return h("li", { class: kind }, parts);
}
