// Answers to a paused run's pending actions (`POST /v1/runs/{id}/actions`):
// an approval's decision, edited arguments included, or a client tool's
// output or error.

/** Approves an approval's call: it executes. */
export interface ApproveAnswer {
  call_id: string;
  /** The child whose action it is, answered through its parent (needed where two children wait on calls of one id). */
  run_id?: string;
  decision: "approve";
  /** Arguments that run in place of the model's (an edited approval), checked against the tool's schema. */
  arguments?: Record<string, unknown>;
}

/** Denies an approval's call: the model is told `Denied: REASON`. */
export interface DenyAnswer {
  call_id: string;
  /** The child whose action it is, answered through its parent (needed where two children wait on calls of one id). */
  run_id?: string;
  decision: "deny";
  reason?: string;
}

/** A client tool's output (any JSON), recorded as its successful result. */
export interface OutputAnswer {
  call_id: string;
  /** The child whose action it is, answered through its parent (needed where two children wait on calls of one id). */
  run_id?: string;
  output: unknown;
}

/** A client tool's failure, recorded as an error result. */
export interface ErrorAnswer {
  call_id: string;
  /** The child whose action it is, answered through its parent (needed where two children wait on calls of one id). */
  run_id?: string;
  error: string;
}

/** One answer to a pending action. */
export type ActionAnswer = ApproveAnswer | DenyAnswer | OutputAnswer | ErrorAnswer;

/** The body of `POST /v1/runs/{id}/actions`. */
export interface ActionsRequest {
  actions: ActionAnswer[];
}
