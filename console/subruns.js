// The console's tree of a run's sub-agents (SPEC section 24): the runs its
// `delegate` calls started, each with its sub-agent, its status and its own
// children, down to where runs may delegate. Read again as the run's
// stream tells of a child starting or ending. A child's prompt and answer
// are untrusted text: only ever set as text.

/** Deepest level of the tree read (runs delegate two deep by default). */
const MAX_LEVELS = 4;

/**
 * Reads the children of the run `id` with `api`, and theirs, and shows them
 * in `list` (`section` hidden when there are none). `h` makes elements.
 */
export async function loadSubruns({ api, h, id, section, list }) {
  let tree;
  try {
    tree = await children(api, id, 1);
  } catch {
    return;
  }
  section.hidden = tree.length === 0;
  list.replaceChildren(...tree.map((node) => item(h, node)));
}

async function children(api, id, level) {
  const page = await api("GET", `/v1/runs?parent_run_id=${encodeURIComponent(id)}&limit=100`);
  // Delegated children only (attempts are shown side by side elsewhere),
  // oldest first.
  const runs = page.runs.filter((run) => run.root_run_id).reverse();
  const nodes = [];
  for (const run of runs) {
    const below = level < MAX_LEVELS && run.subagents ? await children(api, run.id, level + 1) : [];
    nodes.push({ run, below });
  }
  return nodes;
}

function item(h, { run, below }) {
  const agent = run.agent ? `${run.agent.name}@${run.agent.version}` : run.prompt;
  const head = h(
    "div",
    { class: "subrun-head" },
    h("a", { href: `#/runs/${run.id}` }, agent.length > 80 ? `${agent.slice(0, 80)}…` : agent),
    h("span", { class: `status ${run.status}` }, run.status),
  );
  const answer = run.answer ? h("p", { class: "subrun-answer" }, run.answer.length > 200 ? `${run.answer.slice(0, 200)}…` : run.answer) : null;
  const nested = below.length ? h("ul", { class: "subruns" }, ...below.map((node) => item(h, node))) : null;
  return h("li", { class: "subrun", "data-run": run.id }, head, answer, nested);
}
