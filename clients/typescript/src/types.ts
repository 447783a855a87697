/**
 * The API's objects, written by hand to be read, and checked against the
 * schemas of `openapi.yaml` (`test/types-check.ts`): a field added, removed or
 * retyped there fails that check until it is mirrored here.
 *
 * Bodies are JSON in snake_case, as the server sends and takes them.
 */

// ------------------------------------------------------------------ runs

/**
 * A run's status. `queued`, `running` and `requires_action` (paused until a
 * client answers its `pending_actions`) are live; every other one is terminal.
 */
export type RunStatus =
  | "queued"
  | "running"
  | "requires_action"
  | "completed"
  | "step_limit"
  | "tool_limit"
  | "aborted"
  | "timeout"
  | "model_error"
  | "context_limit"
  | "cost_limit"
  | "failed"
  | "interrupted";

/** The statuses a run ends with. */
export type TerminalRunStatus = Exclude<RunStatus, "queued" | "running" | "requires_action">;

/** Which kind of model drives a run. */
export type ModelKind = "openai" | "anthropic" | "scripted";

/**
 * A tool's name: a built-in tool (see {@link BuiltinToolName}) or a tool of
 * one of the run's MCP servers, as `mcp__SERVER__TOOL`.
 */
export type ToolName = string;

/** The tools built into the server. */
export type BuiltinToolName =
  | "read_file"
  | "write_file"
  | "edit_file"
  | "apply_patch"
  | "list_dir"
  | "search"
  | "run_command";

/**
 * Token usage accumulated over a run. `model_calls_with_usage` counts the
 * model responses that reported usage: zero means unknown, not free.
 * `cached_input_tokens` and `cache_write_tokens` are the parts of
 * `input_tokens` read from and written to the provider's prompt cache;
 * `cost_usd` is what the calls cost in US dollars, `null` when unknown.
 */
export interface Usage {
  input_tokens: number;
  output_tokens: number;
  model_calls_with_usage: number;
  cached_input_tokens: number;
  cache_write_tokens: number;
  cost_usd: number | null;
}

/** Usage one model response reported (any count may be missing), and its cost when priced. */
export interface ModelUsage {
  input_tokens?: number;
  output_tokens?: number;
  cached_input_tokens?: number;
  cache_write_tokens?: number;
  cost_usd?: number;
}

/** A run's budgets, as the server settled them. */
export interface RunLimits {
  max_steps: number;
  max_tool_calls: number;
  timeout_ms: number;
  action_timeout_ms: number;
  max_resumes: number;
  /** How often an answer not valid under the run's `output_schema` is sent back. */
  output_retries: number;
  /** What its model calls may cost, in US dollars, when bounded. */
  max_cost_usd?: number;
}

/** A run's context bounds, as the server settled them. */
export interface RunContext {
  max_context_chars: number;
  max_tool_result_chars: number;
  /** Present when the run compacts its context. */
  compaction?: Compaction;
}

/** When, and by which model profile, a run's context is summarised. */
export interface Compaction {
  /** The share of `max_context_chars` past which it compacts (0 to 1]. */
  at: number;
  /** The profile that writes the summaries; absent: the run's own. */
  profile?: string;
}

/** What drives a run; never a secret, never the script. */
export interface ModelInfo {
  provider: ModelKind;
  /** The profile's name; absent for an inline scripted model. */
  profile?: string;
  /** The provider's model id; absent for scripted models. */
  name?: string;
}

/** Tools whose calls wait for a client's decision; `["*"]` is all of them. */
export interface Approval {
  tools: string[];
}

/** A tool the client executes: its calls pause the run until answered. */
export interface ClientTool {
  name: string;
  description?: string;
  /** A JSON Schema with `"type": "object"`. */
  parameters?: Record<string, unknown>;
}

/** Where a run's ends and pauses are posted. */
export interface Webhook {
  url: string;
}

/** A call a paused run waits on. */
export interface PendingAction {
  call_id: string;
  /** `approval`: answer with a decision; `client_tool`: with an output or an error. */
  kind: "approval" | "client_tool";
  name: string;
  arguments: unknown;
  /** The child run whose call it is, listed on its parent while the child waits; absent for the run's own. */
  run_id?: string;
}

/** The agent, and the version of it, a run was made from. */
export interface AgentRef {
  name: string;
  version: number;
}

/** A run, as `GET /v1/runs/{id}` answers it. */
export interface Run {
  id: string;
  status: RunStatus;
  prompt: string;
  /**
   * The final answer of a `completed` run; the last answer of one that never
   * became valid under its `output_schema` (`failed`, `output_invalid`).
   */
  answer: string | null;
  /**
   * The JSON document the final answer of a completed run with an
   * `output_schema` is (any JSON value); `null` otherwise.
   */
  output: unknown;
  /** Why the run did not complete, when known. */
  error: string | null;
  /** Model responses so far. */
  steps: number;
  /** Tool calls requested so far. */
  tool_calls: number;
  usage: Usage;
  /** How often the run was resumed after its process stopped. */
  resumes: number;
  limits: RunLimits;
  context: RunContext;
  tools: ToolName[];
  commands: string[];
  model: ModelInfo;
  metadata: Record<string, unknown>;
  /** The calls the run waits on while `requires_action`; empty otherwise. */
  pending_actions: PendingAction[];
  approval: Approval;
  client_tools: ClientTool[];
  mcp_servers: string[];
  instructions: string | null;
  /** The first run of its conversation (its own id unless it continues another). */
  thread_id: string;
  previous_run_id: string | null;
  webhook?: Webhook;
  /** The agent (and version) the run was made from; `null` when none. */
  agent: AgentRef | null;
  /** The JSON Schema its final answer must be valid under; `null` when none. */
  output_schema: Record<string, unknown> | null;
  /** What the run changed in its workspace (its diff, counted), once it has ended; `null` until then. */
  changes: Changes | null;
  /** The run it is an attempt of, or whose `delegate` call started it; `null` when none. */
  parent_run_id: string | null;
  /** Which attempt of its parent it is (from 1); `null` when none. */
  attempt: number | null;
  /** The temperature an attempt is sent with; absent when its profile's. */
  temperature?: number;
  /** The run's `attempts` as requested; `null` for a run without. */
  attempt_policy: AttemptPolicy | null;
  /** Its attempts as they stand, by number; `null` for a run without. */
  attempts: AttemptSummary[] | null;
  /** The attempt whose answer and workspace it took; `null` until one is chosen, and when none passed. */
  chosen_attempt: number | null;
  /** The schedule that made it; `null` when none. */
  schedule_id: string | null;
  /** The tick it was made for (RFC 3339); `null` for a trigger's run, and any other. */
  schedule_tick: string | null;
  /** The agents it may delegate to, as resolved when it was accepted; `null` for a run without. */
  subagents: Record<string, SubagentSummary> | null;
  /** The root of its tree of delegations, for a run a `delegate` call started; `null` otherwise. */
  root_run_id: string | null;
  /** Its usage and its children's (recursively); `null` for a run without `subagents`. */
  usage_total: Usage | null;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  trace_id: string;
}

/** A run's `attempts`, as accepted. */
export interface AttemptPolicy {
  n: number;
  temperature?: number;
  until: "first_pass" | "all";
}

/** One attempt of a run tried several times. */
export interface AttemptSummary {
  run_id: string;
  attempt: number;
  status: RunStatus;
  /** Whether its checks passed on its workspace as it ended; `null` until then. */
  checks_passed: boolean | null;
}

/**
 * `attempts` of a run request: try it `n` times, each attempt a run of its
 * own, the run's check presets choosing the one it keeps.
 */
export interface AttemptsRequest {
  /** 2 to the server's `[runs] max_attempts` (default 8). */
  n: number;
  /** The temperature of attempts 2 and on; absent: the profile's, or 0.8. */
  temperature?: number | null;
  /** `first_pass` (default) or `all`. */
  until?: "first_pass" | "all";
}

/** The size of a run's diff: the files it touches, the lines it adds and removes. */
export interface Changes {
  files: number;
  insertions: number;
  deletions: number;
}

/** One page of runs, newest first. */
export interface RunList {
  runs: Run[];
  /** Pass as `cursor` for the next page; `null` on the last page. */
  next_cursor: string | null;
}

/** The query of `GET /v1/runs`. */
export interface ListRunsQuery {
  status?: RunStatus;
  thread_id?: string;
  /** An agent's name: the runs made from any of its versions. */
  agent?: string;
  /** The attempts of this run. */
  parent_run_id?: string;
  /** The runs this schedule made. */
  schedule_id?: string;
  /** Page size, 1 to 100 (default 20). */
  limit?: number;
  /** The `next_cursor` of the previous page. */
  cursor?: string;
}

// ---------------------------------------------------- creating a run

/** A model configured on the server, by name. */
export interface ProfileModel {
  profile: string;
}

/** An inline scripted model: the responses it gives, in order. */
export interface ScriptedModel {
  scripted: ScriptedResponse[];
}

/**
 * One response of a scripted model: what a provider would return, plus test
 * knobs: `delay_ms` (the model sleeps that long, honouring cancellation),
 * `error` (the model fails with that message), `only_with_tool` (the response
 * is passed over when the run does not have that tool).
 */
export interface ScriptedResponse {
  content?: string;
  tool_calls?: ToolCall[];
  usage?: ModelUsage;
  /** Shown as the `model_end` event's `finish_reason`. */
  finish_reason?: string;
  delay_ms?: number;
  error?: string;
  only_with_tool?: string;
}

/** A request's budgets; each absent or `null` one takes the server's default. */
export interface RunLimitsRequest {
  max_steps?: number | null;
  max_tool_calls?: number | null;
  timeout_ms?: number | null;
  action_timeout_ms?: number | null;
  max_resumes?: number | null;
  /** How often an answer not valid under the `output_schema` is sent back (default 2). */
  output_retries?: number | null;
  /** What its model calls may cost, in US dollars (ends it `cost_limit`; needs a priced model). */
  max_cost_usd?: number | null;
}

/** A request's context bounds; each absent or `null` one takes the server's default. */
export interface RunContextRequest {
  max_context_chars?: number | null;
  max_tool_result_chars?: number | null;
  /** Summarise instead of dropping when the context passes `at` (default 0.8). */
  compaction?: { at?: number | null; profile?: string | null } | null;
}

/**
 * A repository the server clones into a run's workspace before the run
 * starts. `url` must start with one of the server's `[workspaces] git_allow`
 * (else a 422 `git_not_allowed`).
 */
export interface GitSeed {
  url: string;
  /** A branch, a tag or a full commit sha; absent: the remote's default branch. */
  ref?: string | null;
  /** How much history to fetch, in commits (default 1). */
  depth?: number;
  /** The name of a server environment variable whose value is sent as the credential. */
  token_env?: string | null;
}

/**
 * What a run's workspace starts with: a clone (`git`), the files of an
 * upload (`archive`, an {@link Upload}'s id) and `files` (relative path to
 * text content), which combine; `files` are written last, over the rest.
 */
export interface WorkspaceSeed {
  files?: Record<string, string>;
  git?: GitSeed | null;
  /** An upload's id (`POST /v1/uploads`); an unknown one is a 404 `upload_not_found`. */
  archive?: string | null;
}

/**
 * What a run is made of besides its prompt, its workspace and what it
 * continues: the fields an agent's definition holds. Every one is optional;
 * `null` is as absent.
 */
export interface RunDefinition {
  /** A profile (or its name alone) or an inline script; absent: the server's default. */
  model?: ProfileModel | ScriptedModel | string | null;
  /** The built-in tools the run may use; absent: all of them. */
  tools?: ToolName[] | null;
  webhook?: Webhook | null;
  mcp_servers?: string[] | null;
  /** Command presets the run may execute through `run_command`. */
  commands?: string[] | null;
  limits?: RunLimitsRequest | null;
  context?: RunContextRequest | null;
  /** Free JSON kept with the run; at most 16 KiB serialised. */
  metadata?: Record<string, unknown> | null;
  /** The run's system prompt; `""` for none. */
  instructions?: string | null;
  approval?: Approval | null;
  client_tools?: ClientTool[] | null;
  /**
   * A JSON Schema (draft 2020-12) the final answer must be valid under, as one
   * JSON document: the run's `output` is then that document.
   */
  output_schema?: Record<string, unknown> | null;
  /** Try the run several times; its checks choose. */
  attempts?: AttemptsRequest | null;
  /** Agents the run may delegate to through its `delegate` tool, by name (at most 8). */
  subagents?: Record<string, SubagentRequest> | null;
}

/** What a follow-up of a live run does (SPEC section 23). */
export type Multitask = "reject" | "enqueue" | "interrupt" | "rollback";

/**
 * The body of `POST /v1/runs`. Every field but `prompt` is optional; `null` is
 * as absent. With `agent`, the agent's definition is the base: each field
 * given replaces its whole field, but `limits` and `context`, key by key.
 */
export interface CreateRunRequest extends RunDefinition {
  /** The task; not empty nor only whitespace. */
  prompt: string;
  workspace?: WorkspaceSeed | null;
  /** Continue a conversation from that run's transcript and workspace. */
  previous_run_id?: string | null;
  /**
   * What a follow-up does while the run it continues is live: `reject`
   * (default, 409 `run_live`), `enqueue`, `interrupt` or `rollback`.
   */
  multitask?: Multitask | null;
  /** A stored agent to start from: `NAME` (its latest version) or `NAME@VERSION`. */
  agent?: string | null;
}

// ---------------------------------------------------------------- agents

/**
 * The body of `POST /v1/agents`: a name (`^[a-z0-9][a-z0-9_-]{0,63}$`), a
 * description, and the definition, validated as a run's.
 */
export interface CreateAgentRequest extends RunDefinition {
  name: string;
  /** What the agent is for, for people. */
  description?: string | null;
}

/** The body of `PUT /v1/agents/{name}`: `name`, if given, must be the path's. */
export interface UpdateAgentRequest extends RunDefinition {
  name?: string;
  /** What the agent is for, for people. */
  description?: string | null;
}

/**
 * An inline scripted model as a stored definition holds it: its responses as
 * given (each is read as a {@link ScriptedResponse} when a run reaches it).
 */
export interface AcceptedScriptedModel {
  scripted: unknown[];
}

/** An agent's definition, as accepted: the fields of a {@link RunDefinition}. */
export interface AgentDefinition extends Omit<RunDefinition, "model"> {
  /** A profile (or its name alone) or an inline script, as given. */
  model?: ProfileModel | AcceptedScriptedModel | string | null;
}

/** One version of an agent. */
export interface Agent {
  name: string;
  /** 1 for the first; each update makes the next. */
  version: number;
  description: string | null;
  /** The definition, as accepted. */
  definition: AgentDefinition;
  /** When this version was made (RFC 3339). */
  created_at: string;
  /** Whether the agent is archived now (the same on every version). */
  archived: boolean;
}

/** One page of agents (the latest version of each), by name. */
export interface AgentList {
  agents: Agent[];
  /** Pass as `cursor` for the next page; `null` on the last page. */
  next_cursor: string | null;
}

/** One page of an agent's versions, newest first. */
export interface AgentVersionList {
  versions: Agent[];
  /** Pass as `cursor` for the next page; `null` on the last page. */
  next_cursor: string | null;
}

/** The query of `GET /v1/agents`. */
export interface ListAgentsQuery {
  /** `true` (or `1`, or empty): the archived agents only; `false`, `0` or absent: the live ones. */
  archived?: "true" | "false" | "1" | "0" | "";
  /** Page size, 1 to 100 (default 20). */
  limit?: number;
  /** The `next_cursor` of the previous page. */
  cursor?: string;
}

/** The query of `GET /v1/agents/{name}/versions`. */
export interface ListAgentVersionsQuery {
  /** Page size, 1 to 100 (default 20). */
  limit?: number;
  /** The `next_cursor` of the previous page. */
  cursor?: string;
}

// ------------------------------------------------------------ transcript

/** A tool call a model requested. */
export interface ToolCall {
  id: string;
  name: string;
  /** Untrusted JSON, validated against the tool's schema before anything runs. */
  arguments: unknown;
}

/** A prompt, or a note of the server itself (starting with `[agent-runner] `). */
export interface UserMessage {
  role: "user";
  content: string;
}

/** What the model said, with the tool calls it requested, if any. */
export interface AssistantMessage {
  role: "assistant";
  content: string;
  tool_calls?: ToolCall[];
}

/** A tool's result (its JSON serialisation) or error text. */
export interface ToolMessage {
  role: "tool";
  call_id: string;
  content: string;
  is_error: boolean;
  /** Present when a reviewer approved the call with other arguments (`arguments`, which ran). */
  edited?: true;
  arguments?: Record<string, unknown>;
}

/**
 * A summary of the transcript's first `replaces` messages, which the model
 * is sent in their place from here on (context compaction).
 */
export interface SummaryMessage {
  role: "summary";
  content: string;
  replaces: number;
}

/** One message of a transcript. */
export type Message = UserMessage | AssistantMessage | ToolMessage | SummaryMessage;

/** The body of `GET /v1/runs/{id}/messages`. */
export interface MessageList {
  messages: Message[];
}

// Sub-agents' shapes are in `subagents.ts`, the events of a run's stream in
// `events.ts`.
import type { SubagentRequest, SubagentSummary } from "./subagents.js";
export type * from "./subagents.js";
export type * from "./events.js";
export type * from "./answers.js";
export type * from "./uploads.js";

// ---------------------------------------------------------------- errors

/** The codes of the server's errors, `{"error": {"code": ..., "message": ...}}`. */
export type ApiErrorCode =
  | "invalid_json"
  | "invalid_query"
  | "invalid_path"
  | "bad_request"
  | "unauthorized"
  | "not_found"
  | "agent_not_found"
  | "upload_not_found"
  | "method_not_allowed"
  | "idempotency_key_reused"
  | "run_not_live"
  | "run_not_paused"
  | "run_live"
  | "agent_exists"
  | "payload_too_large"
  | "uri_too_long"
  | "unsupported_media_type"
  | "misdirected_request"
  | "request_timeout"
  | "invalid_request"
  | "invalid_archive"
  | "git_not_allowed"
  | "queue_full"
  | "too_many_connections"
  | "too_many_downloads"
  | "headers_too_large"
  | "internal"
  | "shutting_down"
  | "unavailable"
  | "insufficient_storage"
  | "rate_limited"
  | "quota_exceeded";

/** The body of every error answer. */
export interface ErrorBody {
  error: {
    code: ApiErrorCode;
    message: string;
  };
}
