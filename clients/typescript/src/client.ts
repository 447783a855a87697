import { send, sendBytes, sendJson, sendText, type Transport } from "./http.js";
import { followRunEvents, type EventsOptions } from "./stream.js";
import type {
  ActionAnswer,
  ActionsRequest,
  Agent,
  AgentList,
  AgentVersionList,
  CreateAgentRequest,
  CreateRunRequest,
  ListAgentsQuery,
  ListAgentVersionsQuery,
  ListRunsQuery,
  Message,
  MessageList,
  Run,
  RunEvent,
  RunList,
  RunStatus,
  UpdateAgentRequest,
  Upload,
  UploadContentType,
} from "./types.js";
import type { CreateScheduleRequest, Schedule, ScheduleList, UpdateScheduleRequest } from "./schedules.js";

/** Where the server is and how to talk to it. */
export interface AgentRunnerOptions {
  /** The server's URL. Default `http://127.0.0.1:8080`. */
  baseUrl?: string;
  /** A bearer token, for a server with `[[auth.tokens]]` configured. */
  token?: string;
  /** The `fetch` to use. Default: the global one. */
  fetch?: typeof fetch;
}

/** Options every call takes. */
export interface RequestOptions {
  /** Aborts the call: it rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** Options of {@link AgentRunner.createRun}. */
export interface CreateRunOptions extends RequestOptions {
  /**
   * Answer only once the run has ended, with its final state. A run paused
   * for a decision has not ended: the answer waits for it to be answered.
   * (Node's `fetch` gives up on an answer that takes over 300 s: follow a
   * long or pausing run with {@link AgentRunner.events} instead.)
   */
  wait?: boolean;
  /**
   * Makes the creation safe to repeat: the same key with the same body
   * answers the run the first request created (1 to 255 visible ASCII characters).
   */
  idempotencyKey?: string;
}

/** Filters of {@link AgentRunner.listRuns}. */
export interface ListRunsOptions extends RequestOptions {
  /** Only runs with this status. */
  status?: RunStatus;
  /** Only the runs of this conversation. */
  threadId?: string;
  /** Only the runs made from this agent (any of its versions), by its name. */
  agent?: string;
  /** Only the attempts of this run. */
  parentRunId?: string;
  /** Only the runs this schedule made. */
  scheduleId?: string;
  /** Page size, 1 to 100 (default 20). */
  limit?: number;
}

/** Options of {@link AgentRunner.listRunsPage}. */
export interface ListRunsPageOptions extends ListRunsOptions {
  /** The `next_cursor` of the previous page; absent or `null` for the first. */
  cursor?: string | null;
}

/** Options of {@link AgentRunner.getAgent}. */
export interface GetAgentOptions extends RequestOptions {
  /** That version of the agent (1 for the first); absent: its latest. */
  version?: number;
}

/** Filters of {@link AgentRunner.listAgents}. */
export interface ListAgentsOptions extends RequestOptions {
  /** `true`: the archived agents only; absent or `false`: the live ones. */
  archived?: boolean;
  /** Page size, 1 to 100 (default 20). */
  limit?: number;
}

/** Options of {@link AgentRunner.listAgentsPage}. */
export interface ListAgentsPageOptions extends ListAgentsOptions {
  /** The `next_cursor` of the previous page; absent or `null` for the first. */
  cursor?: string | null;
}

/** Options of {@link AgentRunner.listAgentVersions}. */
export interface ListAgentVersionsOptions extends RequestOptions {
  /** Page size, 1 to 100 (default 20). */
  limit?: number;
}

/** Options of {@link AgentRunner.listAgentVersionsPage}. */
export interface ListAgentVersionsPageOptions extends ListAgentVersionsOptions {
  /** The `next_cursor` of the previous page; absent or `null` for the first. */
  cursor?: string | null;
}

/** Options of {@link AgentRunner.upload}: which kind of archive the bytes are. */
export interface UploadOptions extends RequestOptions {
  /** The archive's `Content-Type`; absent: told by `filename`. */
  contentType?: UploadContentType;
  /** The archive's file name: `.tar.gz` or `.tgz` is a gzip-compressed tar, `.zip` a zip. */
  filename?: string;
}

/** Options of {@link AgentRunner.archive} and {@link AgentRunner.archiveStream}. */
export interface ArchiveOptions extends RequestOptions {
  /** Keep the workspace's `.git` directory in the archive. Default: it is left out. */
  includeGit?: boolean;
}

const DEFAULT_BASE_URL = "http://127.0.0.1:8080";

/**
 * A client of one agent-runner server. Every method throws an
 * {@link AgentRunnerError} for a non-2xx answer (with the server's `code`)
 * and for a server it cannot reach (code `unreachable`).
 *
 * ```ts
 * const runner = new AgentRunner({ baseUrl: "http://127.0.0.1:8080" });
 * const run = await runner.createRun({ prompt: "hi" }, { wait: true });
 * ```
 */
export class AgentRunner {
  private readonly transport: Transport;

  constructor(options: AgentRunnerOptions = {}) {
    this.transport = {
      baseUrl: (options.baseUrl ?? DEFAULT_BASE_URL).replace(/\/+$/, ""),
      token: options.token,
      fetch: options.fetch ?? globalThis.fetch.bind(globalThis),
    };
  }

  /**
   * Creates a run (`POST /v1/runs`): it is queued and starts as soon as a
   * slot is free. Answers the run as it stands, or with `wait` once it has ended.
   */
  async createRun(request: CreateRunRequest, options: CreateRunOptions = {}): Promise<Run> {
    const headers: Record<string, string> = {};
    if (options.idempotencyKey !== undefined) headers["idempotency-key"] = options.idempotencyKey;
    return sendJson<Run>(this.transport, "POST", "/v1/runs", {
      query: { wait: options.wait },
      body: request,
      headers,
      signal: options.signal,
    });
  }

  /** The run `id` as it stands (`GET /v1/runs/{id}`). */
  async getRun(id: string, options: RequestOptions = {}): Promise<Run> {
    return sendJson<Run>(this.transport, "GET", runPath(id), { signal: options.signal });
  }

  /** One page of runs, newest first (`GET /v1/runs`); pass its `next_cursor` for the next. */
  async listRunsPage(options: ListRunsPageOptions = {}): Promise<RunList> {
    const query: ListRunsQuery = {};
    if (options.status !== undefined) query.status = options.status;
    if (options.threadId !== undefined) query.thread_id = options.threadId;
    if (options.agent !== undefined) query.agent = options.agent;
    if (options.parentRunId !== undefined) query.parent_run_id = options.parentRunId;
    if (options.scheduleId !== undefined) query.schedule_id = options.scheduleId;
    if (options.limit !== undefined) query.limit = options.limit;
    if (options.cursor != null) query.cursor = options.cursor;
    return sendJson<RunList>(this.transport, "GET", "/v1/runs", {
      // A copy: an interface has no index signature.
      query: { ...query },
      signal: options.signal,
    });
  }

  /**
   * Every run that matches, newest first, fetching page after page
   * (`limit` runs each) as the iteration goes on.
   */
  async *listRuns(options: ListRunsOptions = {}): AsyncGenerator<Run, void, undefined> {
    let cursor: string | null = null;
    do {
      const page: RunList = await this.listRunsPage({ ...options, cursor });
      yield* page.runs;
      cursor = page.next_cursor;
    } while (cursor !== null);
  }

  /**
   * Cancels the run (`POST /v1/runs/{id}/cancel`): a live run ends `aborted`
   * promptly; one that has already ended is answered as it is, so the call
   * may be repeated safely. Answers the run as it stands.
   */
  async cancel(id: string, options: RequestOptions = {}): Promise<Run> {
    return sendJson<Run>(this.transport, "POST", `${runPath(id)}/cancel`, {
      signal: options.signal,
    });
  }

  /**
   * Answers some or all of a paused run's `pending_actions`
   * (`POST /v1/runs/{id}/actions`); once all are answered the run resumes.
   * Nothing is stored when any answer is wrong. Answers the run as it stands.
   */
  async answerActions(id: string, answers: ActionAnswer[], options: RequestOptions = {}): Promise<Run> {
    const body: ActionsRequest = { actions: answers };
    return sendJson<Run>(this.transport, "POST", `${runPath(id)}/actions`, {
      body,
      signal: options.signal,
    });
  }

  /** Approves the pending call `callId`: it executes. */
  async approve(id: string, callId: string, options: RequestOptions = {}): Promise<Run> {
    return this.answerActions(id, [{ call_id: callId, decision: "approve" }], options);
  }

  /**
   * Approves the pending call `callId` with `args` in place of the model's
   * arguments (checked against the tool's schema; a 422 when not valid):
   * they run, and the model is told a reviewer changed them.
   */
  async approveWith(
    id: string,
    callId: string,
    args: Record<string, unknown>,
    options: RequestOptions = {},
  ): Promise<Run> {
    return this.answerActions(id, [{ call_id: callId, decision: "approve", arguments: args }], options);
  }

  /** Denies the pending call `callId`: the model is told `Denied: REASON` (or that the client denied it). */
  async deny(id: string, callId: string, reason?: string, options: RequestOptions = {}): Promise<Run> {
    const answer: ActionAnswer =
      reason === undefined
        ? { call_id: callId, decision: "deny" }
        : { call_id: callId, decision: "deny", reason };
    return this.answerActions(id, [answer], options);
  }

  /** Gives the output (any JSON) of the client tool call `callId`. */
  async submitOutput(id: string, callId: string, output: unknown, options: RequestOptions = {}): Promise<Run> {
    return this.answerActions(id, [{ call_id: callId, output }], options);
  }

  /** Fails the client tool call `callId` with `error`. */
  async submitError(id: string, callId: string, error: string, options: RequestOptions = {}): Promise<Run> {
    return this.answerActions(id, [{ call_id: callId, error }], options);
  }

  /** The run's transcript so far, in order (`GET /v1/runs/{id}/messages`). */
  async messages(id: string, options: RequestOptions = {}): Promise<Message[]> {
    const list = await sendJson<MessageList>(this.transport, "GET", `${runPath(id)}/messages`, {
      signal: options.signal,
    });
    return list.messages;
  }

  /**
   * The run's events (`GET /v1/runs/{id}/events`): past ones replayed, live
   * ones followed, each exactly once, until `run_end` (the last one yielded).
   * A dropped connection is resumed with `Last-Event-ID`; see {@link EventsOptions}.
   * Breaking out of the loop closes the connection.
   */
  events(id: string, options: EventsOptions = {}): AsyncGenerator<RunEvent, void, undefined> {
    return followRunEvents(this.transport, id, options);
  }

  /**
   * The run's workspace against how it started, as a git-style unified diff
   * (`GET /v1/runs/{id}/diff`): `""` when nothing changed. A live run's
   * too, as its workspace is now; `git apply` applies it to the starting tree.
   */
  async diff(id: string, options: RequestOptions = {}): Promise<string> {
    return sendText(this.transport, "GET", `${runPath(id)}/diff`, { signal: options.signal });
  }

  /**
   * The run's workspace as a `.tar.gz` (`GET /v1/runs/{id}/archive`), whole,
   * without `.git` unless `includeGit`. It counts against the tenant's
   * concurrent downloads (429 `too_many_downloads` beyond them). For a large
   * workspace, {@link AgentRunner.archiveStream} reads it as it comes.
   */
  async archive(id: string, options: ArchiveOptions = {}): Promise<Uint8Array> {
    return sendBytes(this.transport, "GET", `${runPath(id)}/archive`, {
      query: archiveQuery(options),
      signal: options.signal,
    });
  }

  /**
   * The run's workspace as a `.tar.gz`, as a stream of its bytes as they
   * come (to pipe to a file); as {@link AgentRunner.archive} otherwise. The
   * download counts until the stream is read to its end or cancelled.
   */
  async archiveStream(id: string, options: ArchiveOptions = {}): Promise<ReadableStream<Uint8Array>> {
    const response = await send(this.transport, "GET", `${runPath(id)}/archive`, {
      query: archiveQuery(options),
      signal: options.signal,
    });
    return response.body ?? new Blob([]).stream();
  }

  /**
   * Uploads a `.tar.gz` or `.zip` archive (`POST /v1/uploads`) for runs to
   * seed their workspaces with: `createRun({ ..., workspace: { archive:
   * upload.id } })`. Its kind is `options.contentType`, or told by
   * `options.filename`. An archive with an entry that would escape the
   * workspace, or that is corrupt, is a 422 `invalid_archive`.
   */
  async upload(data: Uint8Array | ArrayBuffer | Blob, options: UploadOptions): Promise<Upload> {
    const contentType = options.contentType ?? archiveType(options.filename);
    return sendJson<Upload>(this.transport, "POST", "/v1/uploads", {
      bytes: { data, contentType },
      signal: options.signal,
    });
  }

  /** The upload `id` (`GET /v1/uploads/{id}`); an unknown or expired one is a 404 `upload_not_found`. */
  async getUpload(id: string, options: RequestOptions = {}): Promise<Upload> {
    return sendJson<Upload>(this.transport, "GET", uploadPath(id), { signal: options.signal });
  }

  /** Removes the upload `id` (`DELETE /v1/uploads/{id}`): runs can no longer name it. */
  async deleteUpload(id: string, options: RequestOptions = {}): Promise<void> {
    const response = await send(this.transport, "DELETE", uploadPath(id), { signal: options.signal });
    await response.body?.cancel();
  }

  /**
   * Stores an agent (`POST /v1/agents`): its name, description and
   * definition (the fields of a run body but `prompt`, `workspace`,
   * `previous_run_id` and `agent`), validated as a run's. Answers its
   * version 1, or the next version of an archived agent of that name, which
   * it brings back. A live agent of that name is a 409 `agent_exists`.
   */
  async createAgent(request: CreateAgentRequest, options: RequestOptions = {}): Promise<Agent> {
    return sendJson<Agent>(this.transport, "POST", "/v1/agents", {
      body: request,
      signal: options.signal,
    });
  }

  /**
   * Makes the agent's next version from `request` (`PUT /v1/agents/{name}`);
   * the versions before it stay as they were. Answers the new version.
   */
  async updateAgent(name: string, request: UpdateAgentRequest, options: RequestOptions = {}): Promise<Agent> {
    return sendJson<Agent>(this.transport, "PUT", agentPath(name), {
      body: request,
      signal: options.signal,
    });
  }

  /**
   * The agent's latest version (`GET /v1/agents/{name}`), or with `version`
   * that one (`GET /v1/agents/{name}/versions/{version}`). An archived
   * agent is answered too, with `archived` true.
   */
  async getAgent(name: string, options: GetAgentOptions = {}): Promise<Agent> {
    const path =
      options.version === undefined
        ? agentPath(name)
        : `${agentPath(name)}/versions/${encodeURIComponent(String(options.version))}`;
    return sendJson<Agent>(this.transport, "GET", path, { signal: options.signal });
  }

  /** One page of agents, by name (`GET /v1/agents`); pass its `next_cursor` for the next. */
  async listAgentsPage(options: ListAgentsPageOptions = {}): Promise<AgentList> {
    const query: ListAgentsQuery = {};
    if (options.archived !== undefined) query.archived = options.archived ? "true" : "false";
    if (options.limit !== undefined) query.limit = options.limit;
    if (options.cursor != null) query.cursor = options.cursor;
    return sendJson<AgentList>(this.transport, "GET", "/v1/agents", {
      query: { ...query },
      signal: options.signal,
    });
  }

  /**
   * Every agent (the live ones, or with `archived` the archived ones), each
   * as its latest version, by name, fetching page after page as the
   * iteration goes on.
   */
  async *listAgents(options: ListAgentsOptions = {}): AsyncGenerator<Agent, void, undefined> {
    let cursor: string | null = null;
    do {
      const page: AgentList = await this.listAgentsPage({ ...options, cursor });
      yield* page.agents;
      cursor = page.next_cursor;
    } while (cursor !== null);
  }

  /** One page of the agent's versions, newest first (`GET /v1/agents/{name}/versions`). */
  async listAgentVersionsPage(name: string, options: ListAgentVersionsPageOptions = {}): Promise<AgentVersionList> {
    const query: ListAgentVersionsQuery = {};
    if (options.limit !== undefined) query.limit = options.limit;
    if (options.cursor != null) query.cursor = options.cursor;
    return sendJson<AgentVersionList>(this.transport, "GET", `${agentPath(name)}/versions`, {
      query: { ...query },
      signal: options.signal,
    });
  }

  /** Every version of the agent, newest first, fetching page after page. */
  async *listAgentVersions(
    name: string,
    options: ListAgentVersionsOptions = {},
  ): AsyncGenerator<Agent, void, undefined> {
    let cursor: string | null = null;
    do {
      const page: AgentVersionList = await this.listAgentVersionsPage(name, { ...options, cursor });
      yield* page.versions;
      cursor = page.next_cursor;
    } while (cursor !== null);
  }

  /**
   * Archives the agent (`DELETE /v1/agents/{name}`): runs can no longer name
   * it, its versions stay readable, and the runs made from it keep their
   * record. Archiving it again is no error; `createAgent` with its name
   * brings it back.
   */
  async deleteAgent(name: string, options: RequestOptions = {}): Promise<void> {
    const response = await send(this.transport, "DELETE", agentPath(name), { signal: options.signal });
    await response.body?.cancel();
  }

  /**
   * Creates a schedule (`POST /v1/schedules`): a cron (five fields, or six
   * with seconds first) in a timezone, and the run body each tick makes a
   * run of. Each tick makes exactly one run, across replicas and restarts.
   */
  async createSchedule(request: CreateScheduleRequest, options: RequestOptions = {}): Promise<Schedule> {
    return sendJson<Schedule>(this.transport, "POST", "/v1/schedules", {
      body: request,
      signal: options.signal,
    });
  }

  /** The schedule `id`, with its next tick and its newest run. */
  async getSchedule(id: string, options: RequestOptions = {}): Promise<Schedule> {
    return sendJson<Schedule>(this.transport, "GET", schedulePath(id), { signal: options.signal });
  }

  /** Changes a schedule (`PATCH`): the fields given replace its own. */
  async updateSchedule(id: string, request: UpdateScheduleRequest, options: RequestOptions = {}): Promise<Schedule> {
    return sendJson<Schedule>(this.transport, "PATCH", schedulePath(id), {
      body: request,
      signal: options.signal,
    });
  }

  /** Deletes a schedule; the runs it made stay. */
  async deleteSchedule(id: string, options: RequestOptions = {}): Promise<void> {
    const response = await send(this.transport, "DELETE", schedulePath(id), { signal: options.signal });
    await response.body?.cancel();
  }

  /**
   * One run of the schedule now (`POST /v1/schedules/{id}/trigger`), without
   * a tick of its own; a 409 `run_live` while its previous run is live and
   * its overlap is `skip`.
   */
  async triggerSchedule(id: string, options: RequestOptions = {}): Promise<Run> {
    return sendJson<Run>(this.transport, "POST", `${schedulePath(id)}/trigger`, { signal: options.signal });
  }

  /** One page of schedules, in the order they were made (`GET /v1/schedules`). */
  async listSchedulesPage(options: ListSchedulesPageOptions = {}): Promise<ScheduleList> {
    const query: Record<string, string | number> = {};
    if (options.limit !== undefined) query.limit = options.limit;
    if (options.cursor != null) query.cursor = options.cursor;
    return sendJson<ScheduleList>(this.transport, "GET", "/v1/schedules", { query, signal: options.signal });
  }

  /** Every schedule, fetching page after page as the iteration goes on. */
  async *listSchedules(options: ListSchedulesPageOptions = {}): AsyncGenerator<Schedule, void, undefined> {
    let cursor: string | null = null;
    do {
      const page: ScheduleList = await this.listSchedulesPage({ ...options, cursor });
      yield* page.schedules;
      cursor = page.next_cursor;
    } while (cursor !== null);
  }
}

function schedulePath(id: string): string {
  return `/v1/schedules/${encodeURIComponent(id)}`;
}

/** Options of {@link AgentRunner.listSchedulesPage}. */
export interface ListSchedulesPageOptions extends RequestOptions {
  /** Page size, 1 to 100 (default 20). */
  limit?: number;
  /** The `next_cursor` of the previous page; absent or `null` for the first. */
  cursor?: string | null;
}

function runPath(id: string): string {
  return `/v1/runs/${encodeURIComponent(id)}`;
}

function agentPath(name: string): string {
  return `/v1/agents/${encodeURIComponent(name)}`;
}

function uploadPath(id: string): string {
  return `/v1/uploads/${encodeURIComponent(id)}`;
}

function archiveQuery(options: ArchiveOptions): Record<string, string | undefined> {
  return { include_git: options.includeGit ? "true" : undefined };
}

/**
 * The `Content-Type` of an archive named `filename`: `.tar.gz` and `.tgz`
 * are gzip-compressed tars, `.zip` zips (in any case). Throws a `TypeError`
 * for any other name, and for none.
 */
export function archiveType(filename: string | undefined): UploadContentType {
  const name = (filename ?? "").toLowerCase();
  if (name.endsWith(".tar.gz") || name.endsWith(".tgz")) return "application/gzip";
  if (name.endsWith(".zip")) return "application/zip";
  throw new TypeError(
    filename === undefined
      ? "upload needs a contentType, or a filename ending .tar.gz, .tgz or .zip"
      : `cannot tell the kind of archive ${JSON.stringify(filename)}: give a contentType, or a name ending .tar.gz, .tgz or .zip`,
  );
}
