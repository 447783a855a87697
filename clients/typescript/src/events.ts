/**
 * The events of a run's stream (`GET /v1/runs/{id}/events`), one interface
 * for each `type`, and their union.
 */
import type {
  Message,
  ModelInfo,
  ModelUsage,
  PendingAction,
  RunLimits,
  TerminalRunStatus,
  ToolName,
  Usage,
} from "./types.js";

/** What every stored event has: `sequence` is 1, 2, 3, ... per run, no gaps. */
interface StoredEvent {
  run_id: string;
  sequence: number;
  /** RFC 3339. */
  timestamp: string;
}

/** The run starts, with its model, limits and tools. */
export interface RunStartEvent extends StoredEvent {
  type: "run_start";
  model?: ModelInfo;
  limits?: RunLimits;
  tools?: ToolName[];
}

/** A model call starts. */
export interface ModelStartEvent extends StoredEvent {
  type: "model_start";
}

/** A model call ended. */
export interface ModelEndEvent extends StoredEvent {
  type: "model_end";
  duration_ms: number;
  usage?: ModelUsage;
  /** Why the model stopped, in its provider's words (`stop`, `tool_calls`, `end_turn`, ...), where it says. */
  finish_reason?: string;
  /** The profile that answered, when a fallback did (the call's usage and cost are its). */
  profile?: string;
}

/** A model call's retries were spent on a failure that may pass: the same request goes to profile `to`. */
export interface ModelFallbackEvent extends StoredEvent {
  type: "model_fallback";
  from: string;
  to: string;
  reason: string;
}

/** A model call failed. */
export interface ModelErrorEvent extends StoredEvent {
  type: "model_error";
  error: string;
}

/** A tool call starts. */
export interface ToolStartEvent extends StoredEvent {
  type: "tool_start";
  call_id: string;
  name: string;
  /** Present when a reviewer approved the call with other arguments (`arguments`, which run). */
  edited?: true;
  arguments?: Record<string, unknown>;
}

/** A tool call ended. */
export interface ToolEndEvent extends StoredEvent {
  type: "tool_end";
  call_id: string;
  name: string;
  duration_ms: number;
  is_error: boolean;
}

/** A message joined the transcript. */
export interface MessageEvent extends StoredEvent {
  type: "message";
  message: Message;
}

/** The run paused for a decision on `actions` (its `pending_actions`). */
export interface ActionsRequiredEvent extends StoredEvent {
  type: "actions_required";
  actions: PendingAction[];
}

/** The run's process stopped while it ran, and the run goes on from its last stored step. */
export interface RunResumedEvent extends StoredEvent {
  type: "run_resumed";
  /** 1 for its first resume, 2 for its second, ... */
  attempt: number;
  reason: "crash" | "shutdown" | "lease_lost";
}

/** An attempt of the run was made; `run_id` is the attempt's own run. */
export interface AttemptStartEvent extends StoredEvent {
  type: "attempt_start";
  attempt: number;
}

/** An attempt ended and its checks ran; `run_id` is the attempt's own run. */
export interface AttemptEndEvent extends StoredEvent {
  type: "attempt_end";
  attempt: number;
  status: TerminalRunStatus;
  checks_passed: boolean;
}

/** A `delegate` call started a child run; `run_id` is the child's (SPEC section 24). */
export interface SubrunStartEvent extends StoredEvent {
  type: "subrun_start";
  call_id: string;
  /** The sub-agent's name. */
  agent: string;
}

/** A child run a `delegate` call started ended; `run_id` is the child's. */
export interface SubrunEndEvent extends StoredEvent {
  type: "subrun_end";
  call_id: string;
  status: TerminalRunStatus;
}

/**
 * A summary now stands in for the transcript's first `replaced_messages`;
 * with `fallback`, the summary failed and older results are masked instead.
 */
export interface CompactionEvent extends StoredEvent {
  type: "compaction";
  replaced_messages: number;
  before_chars: number;
  after_chars: number;
  duration_ms: number;
  usage?: ModelUsage;
  fallback?: "masking";
  error?: string;
}

/** The run ended; always its last event, exactly once. */
export interface RunEndEvent extends StoredEvent {
  type: "run_end";
  status: TerminalRunStatus;
  steps: number;
  tool_calls: number;
  usage: Usage;
  /** Present when the run completed. */
  answer?: string;
  /** Present when the run ended on an error. */
  error?: string;
  /** The run's `output` (`null` without an output schema); absent from events stored before it existed. */
  output?: unknown;
}

/** Text a streaming model produced: live only, never stored, no `sequence`. */
export interface ModelDeltaEvent {
  run_id: string;
  timestamp: string;
  type: "model_delta";
  text: string;
}

/** One event of a run, told apart by `type`. */
export type RunEvent =
  | RunStartEvent
  | ModelStartEvent
  | ModelEndEvent
  | ModelErrorEvent
  | ModelFallbackEvent
  | ToolStartEvent
  | ToolEndEvent
  | MessageEvent
  | ActionsRequiredEvent
  | RunResumedEvent
  | AttemptStartEvent
  | AttemptEndEvent
  | SubrunStartEvent
  | SubrunEndEvent
  | CompactionEvent
  | RunEndEvent
  | ModelDeltaEvent;

