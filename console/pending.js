// The console's pending actions of a paused run (SPEC sections 8, 24 and
// 25): an approval is approved, approved with edited arguments (a JSON
// object, checked by the server against the tool's schema), or denied with
// a reason; a client tool's call is given its output or an error. A
// child's action, listed on its parent, names its run. Arguments are
// untrusted text: only ever set as text.

/**
 * The item of `action`, a pending action of `run`: `api` calls the server,
 * `h` makes elements, `answered` is told the run an answer made.
 */
export function pendingItem({ api, h, run, action, answered }) {
  const problem = h("p", { class: "error", hidden: true });
  let item;
  const send = async (answer, buttons) => {
    for (const button of buttons) button.disabled = true;
    problem.hidden = true;
    try {
      const own = action.run_id ? { run_id: action.run_id } : {};
      const made = await api("POST", `/v1/runs/${run.id}/actions`, { actions: [{ call_id: action.call_id, ...own, ...answer }] });
      // Answered: a later pause that asks again under the same call id gets
      // a fresh item, not this one.
      item.dataset.answered = "true";
      answered(made);
    } catch (error) {
      showProblem(error.message);
      for (const button of buttons) button.disabled = false;
    }
  };
  const showProblem = (text) => {
    problem.textContent = text;
    problem.hidden = false;
  };
  const head = h(
    "div",
    { class: "pending-head" },
    h("strong", {}, action.name),
    h("span", { class: "kind" }, action.kind === "approval" ? "asks for approval" : "runs on your side"),
    action.run_id && h("a", { class: "pending-run", href: `#/runs/${action.run_id}` }, "a sub-agent's call"),
  );
  const proposed = JSON.stringify(action.arguments, null, 2);
  if (action.kind !== "approval") {
    item = h("li", { class: "pending-item", dataset: { callId: action.call_id } }, head, h("pre", { class: "arguments" }, proposed), clientControls(h, send), problem);
    return item;
  }
  // The arguments, editable: approved as they are, or as edited.
  const args = h("textarea", { class: "arguments", rows: Math.min(12, proposed.split("\n").length + 1), "aria-label": "Arguments", spellcheck: "false" });
  args.value = proposed;
  const reason = h("input", { type: "text", placeholder: "reason (for a denial)", "aria-label": "Reason" });
  const approve = h("button", { type: "button", class: "approve" }, "Approve");
  const deny = h("button", { type: "button", class: "danger" }, "Deny");
  const edited = () => args.value.trim() !== proposed.trim();
  args.addEventListener("input", () => {
    approve.textContent = edited() ? "Approve edited" : "Approve";
  });
  approve.addEventListener("click", () => {
    if (!edited()) return send({ decision: "approve" }, [approve, deny]);
    let value;
    try {
      value = JSON.parse(args.value);
    } catch (error) {
      return showProblem(`The arguments are not JSON: ${error.message}`);
    }
    if (value === null || typeof value !== "object" || Array.isArray(value)) {
      return showProblem("The arguments must be a JSON object.");
    }
    return send({ decision: "approve", arguments: value }, [approve, deny]);
  });
  deny.addEventListener("click", () => {
    const answer = { decision: "deny" };
    if (reason.value.trim()) answer.reason = reason.value.trim();
    send(answer, [approve, deny]);
  });
  const controls = h("div", { class: "controls" }, approve, deny, reason);
  item = h("li", { class: "pending-item", dataset: { callId: action.call_id } }, head, args, controls, problem);
  return item;
}

/** A client tool's controls: its output (JSON, or plain text), or an error. */
function clientControls(h, send) {
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
  return h("div", { class: "controls" }, output, give, fail);
}
