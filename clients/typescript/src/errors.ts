import type { ApiErrorCode } from "./types.js";

/**
 * The codes the client itself gives, when there is no error answer to read:
 * - `unreachable`: no connection could be made, or it failed before an answer;
 * - `connection_lost`: a connection broke in the middle of an answer, or a
 *   run's event stream dropped and could not be resumed;
 * - `invalid_response`: an answer that is not what the API sends (not JSON,
 *   or an error without the `{"error": {...}}` shape).
 */
export type ClientErrorCode = "unreachable" | "connection_lost" | "invalid_response";

/** Every code an {@link AgentRunnerError} may carry. */
export type ErrorCode = ApiErrorCode | ClientErrorCode;

/** The fields of an {@link AgentRunnerError}. */
export interface AgentRunnerErrorInit {
  code: ErrorCode;
  message: string;
  status?: number;
  retryAfter?: number;
  cause?: unknown;
}

/**
 * The one error the client throws: a non-2xx answer (with the server's `code`
 * and `message`), an unreachable server, a stream that could not be resumed.
 * An aborted call rejects with its signal's reason instead.
 */
export class AgentRunnerError extends Error {
  /** The server's error code (`not_found`, `invalid_request`, ...) or the client's. */
  readonly code: ErrorCode;
  /** The HTTP status of the answer; `undefined` when none came. */
  readonly status: number | undefined;
  /** Seconds to wait before trying again, when the server said (`Retry-After`). */
  readonly retryAfter: number | undefined;

  constructor(init: AgentRunnerErrorInit) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = "AgentRunnerError";
    this.code = init.code;
    this.status = init.status;
    this.retryAfter = init.retryAfter;
  }
}

/** The error of a non-2xx `response`, from its `{"error": {...}}` body. */
export async function errorFromResponse(response: Response): Promise<AgentRunnerError> {
  const status = response.status;
  const retryAfter = parseRetryAfter(response.headers.get("retry-after"));
  const text = await response.text().catch(() => "");
  const body = parseJson(text);
  if (isErrorBody(body)) {
    return new AgentRunnerError({
      code: body.error.code as ErrorCode,
      message: body.error.message,
      status,
      retryAfter,
    });
  }
  const excerpt = text.length > 200 ? `${text.slice(0, 200)}...` : text;
  return new AgentRunnerError({
    code: "invalid_response",
    message: `HTTP ${status} ${response.statusText} without an error body${excerpt ? `: ${excerpt}` : ""}`,
    status,
    retryAfter,
  });
}

/**
 * The error of a `fetch` to the server at `baseUrl` that failed before any
 * answer: no server listens there, or the connection broke.
 */
export function unreachableError(baseUrl: string, cause: unknown): AgentRunnerError {
  const reason = networkReason(cause);
  const message = CONNECT_FAILURES.has(reason ?? "")
    ? `cannot reach agent-runner at ${baseUrl} (${reason}): ` +
      "start it with `agent-runner serve`, or pass another `baseUrl`"
    : `the connection to agent-runner at ${baseUrl} failed before an answer` +
      (reason === undefined ? "" : ` (${reason})`);
  return new AgentRunnerError({ code: "unreachable", message, cause });
}

/** The system's reasons for a connection that could not be made at all. */
const CONNECT_FAILURES = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "UND_ERR_CONNECT_TIMEOUT",
]);

/** `Retry-After` in seconds: delta-seconds, or an HTTP date from now. */
function parseRetryAfter(value: string | null): number | undefined {
  if (value === null || value.trim() === "") return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds;
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, Math.ceil((date - Date.now()) / 1000));
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function isErrorBody(body: unknown): body is { error: { code: string; message: string } } {
  if (typeof body !== "object" || body === null || !("error" in body)) return false;
  const error = body.error;
  return (
    typeof error === "object" &&
    error !== null &&
    "code" in error &&
    typeof error.code === "string" &&
    "message" in error &&
    typeof error.message === "string"
  );
}

/** The system's reason of a failed `fetch` (Node puts it in `cause.code`). */
function networkReason(error: unknown): string | undefined {
  let current: unknown = error;
  while (typeof current === "object" && current !== null) {
    if ("code" in current && typeof current.code === "string") return current.code;
    current = "cause" in current ? current.cause : undefined;
  }
  return error instanceof Error ? error.message : undefined;
}
