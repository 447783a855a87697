import { AgentRunnerError } from "./errors.js";
import { send, type Transport } from "./http.js";
import { readEventStream, SseParser } from "./sse.js";
import type { RunEvent } from "./types.js";

/** Options of {@link followRunEvents}. */
export interface EventsOptions {
  /** Start after this sequence (the events up to it are not sent). Default: from the first. */
  after?: number;
  /** Stops the stream: the iteration rejects with the signal's reason. */
  signal?: AbortSignal;
  /**
   * How many reconnections in a row may bring no event before the stream
   * gives up with code `connection_lost`. Default 5; 0 never reconnects.
   */
  maxReconnects?: number;
}

/** Until the server says otherwise with `retry:`. */
const DEFAULT_RETRY_MS = 1000;
const MAX_BACKOFF_MS = 30_000;
const DEFAULT_MAX_RECONNECTS = 5;

/**
 * The events of run `runId`, from its first (or after `options.after`) to its
 * `run_end`, each exactly once, following it live.
 *
 * A connection that drops (the body errors, or ends before `run_end`) is
 * resumed with `Last-Event-ID` set to the last sequence received, after the
 * server's `retry:` time, doubled for each further attempt in a row that
 * brings nothing; a `204` on resuming means the run has ended. `model_delta`
 * events (live only, without an id) are yielded but move no resume position.
 * An error of the first request is thrown at once, as are 4xx answers.
 */
export async function* followRunEvents(
  transport: Transport,
  runId: string,
  options: EventsOptions = {},
): AsyncGenerator<RunEvent, void, undefined> {
  const { signal } = options;
  const maxReconnects = options.maxReconnects ?? DEFAULT_MAX_RECONNECTS;
  const path = `/v1/runs/${encodeURIComponent(runId)}/events`;
  let lastId = options.after === undefined ? undefined : String(options.after);
  let retryMs = DEFAULT_RETRY_MS;
  // Reconnections since an event last came, and why the last one was needed.
  let reconnects = 0;
  let problem: unknown;
  let waitMs = 0;
  for (let first = true; ; first = false) {
    if (!first) {
      if (reconnects === maxReconnects) throw lostError(runId, lastId, reconnects, problem);
      reconnects += 1;
      await sleep(Math.max(waitMs, Math.min(retryMs * 2 ** (reconnects - 1), MAX_BACKOFF_MS)), signal);
    }
    waitMs = 0;
    const headers: Record<string, string> = { accept: "text/event-stream" };
    if (lastId !== undefined) headers["last-event-id"] = lastId;
    let response: Response;
    try {
      response = await send(transport, "GET", path, { headers, signal });
    } catch (error) {
      if (first || !isTransient(error)) throw error;
      problem = error;
      waitMs = (error.retryAfter ?? 0) * 1000;
      continue;
    }
    // Resuming at or past the end of a run that has ended.
    if (response.status === 204 || response.body === null) return;
    const parser = new SseParser();
    try {
      for await (const message of readEventStream(response.body, parser)) {
        const event = parseEvent(message.data, runId);
        if (message.id !== undefined) lastId = message.id;
        reconnects = 0;
        yield event;
        if (event.type === "run_end") return;
      }
      problem = new Error("the stream ended before the run's end");
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      if (error instanceof AgentRunnerError) throw error;
      problem = error;
    } finally {
      retryMs = parser.retry ?? retryMs;
    }
  }
}

/** Whether a failed reconnection may be tried again: no answer, or a 5xx or 429. */
function isTransient(error: unknown): error is AgentRunnerError {
  if (!(error instanceof AgentRunnerError)) return false;
  if (error.status === undefined) return error.code === "unreachable";
  return error.status >= 500 || error.status === 429;
}

function parseEvent(data: string, runId: string): RunEvent {
  try {
    return JSON.parse(data) as RunEvent;
  } catch (error) {
    throw new AgentRunnerError({
      code: "invalid_response",
      message: `an event of run ${runId} is not JSON: ${data.slice(0, 200)}`,
      cause: error,
    });
  }
}

function lostError(
  runId: string,
  lastId: string | undefined,
  attempts: number,
  problem: unknown,
): AgentRunnerError {
  const reason = problem instanceof Error ? problem.message : String(problem);
  return new AgentRunnerError({
    code: "connection_lost",
    message:
      `the event stream of run ${runId} dropped after sequence ${lastId ?? 0}` +
      (attempts === 0 ? "" : ` and ${attempts} attempt(s) to resume it failed`) +
      `: ${reason}`,
    cause: problem,
  });
}

/** Waits `ms`, or rejects with `signal`'s reason once it aborts. */
function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
