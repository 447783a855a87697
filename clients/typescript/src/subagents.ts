/**
 * Sub-agents (SPEC section 24): the agents a run may delegate to, as a
 * request gives them and as the run object shows them.
 */
import type { AgentRef, RunDefinition } from "./types.js";

/** Where a child works: in its parent's directory, or in a copy of it. */
export type SubagentWorkspace = "shared" | "copy";

/**
 * A stored agent (`{ agent: "NAME" | "NAME@N" }`, with `description` and
 * `workspace` alone beside it) or an inline definition: the fields of a run
 * body but `prompt`, `previous_run_id`, `attempts`, `webhook` and
 * `multitask`.
 */
export interface SubagentRequest extends Omit<RunDefinition, "webhook" | "attempts"> {
  agent?: string;
  /** What the model is told the sub-agent is for. */
  description?: string | null;
  workspace?: SubagentWorkspace | null;
}

/** A sub-agent as the run object shows it (never its definition). */
export interface SubagentSummary {
  description: string;
  workspace: SubagentWorkspace;
  agent: AgentRef | null;
}
