/**
 * The TypeScript client of agent-runner: create runs, follow their events
 * (resuming across a dropped connection), answer their pending actions,
 * cancel them; schedules that make runs on a cron. `fetch` only, no
 * dependency.
 */
export { AgentRunner, archiveType } from "./client.js";
export type {
  AgentRunnerOptions,
  ArchiveOptions,
  CreateRunOptions,
  GetAgentOptions,
  ListAgentsOptions,
  ListAgentsPageOptions,
  ListAgentVersionsOptions,
  ListAgentVersionsPageOptions,
  ListRunsOptions,
  ListRunsPageOptions,
  ListSchedulesPageOptions,
  RequestOptions,
  UploadOptions,
} from "./client.js";
export { AgentRunnerError } from "./errors.js";
export type { AgentRunnerErrorInit, ClientErrorCode, ErrorCode } from "./errors.js";
export type { EventsOptions } from "./stream.js";
export { SseParser } from "./sse.js";
export type { SseMessage } from "./sse.js";
export type * from "./types.js";
export type * from "./schedules.js";
