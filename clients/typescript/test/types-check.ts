/**
 * The hand-written types of `src/types.ts` against the ones `openapi-typescript`
 * generates from `openapi.yaml` (into `generated/`, by `npm run check:types`).
 * Nothing runs: the check is that this file compiles. `Same` is type identity,
 * so a field added to, removed from or retyped in a schema (optional or not)
 * fails it until `src/types.ts` says the same.
 */
import type { components, operations } from "./generated/openapi.js";
import type * as T from "../src/types.js";
import type * as S from "../src/schedules.js";

type Schemas = components["schemas"];

/** `true` when `A` and `B` are the same type, field for field. */
type Same<A, B> = (<V>() => V extends A ? 1 : 2) extends <V>() => V extends B ? 1 : 2 ? true : false;

/** Compiles only when given `true`. */
type Assert<Check extends true> = Check;

/** The JSON body of an operation's answer `Status`. */
type JsonAnswer<Op extends keyof operations, Status extends number> = operations[Op]["responses"] extends {
  [S in Status]: { content: { "application/json": infer Body } };
}
  ? Body
  : never;

/** The JSON body an operation takes. */
type JsonRequest<Op extends keyof operations> = operations[Op] extends {
  requestBody: { content: { "application/json": infer Body } };
}
  ? Body
  : never;

type Request<Op extends keyof operations> = operations[Op]["parameters"];

// Exported only so that they count as used.
export type Schemata = [
  Assert<Same<T.RunStatus, Schemas["RunStatus"]>>,
  Assert<Same<T.TerminalRunStatus, Schemas["TerminalRunStatus"]>>,
  Assert<Same<T.ModelKind, Schemas["ModelKind"]>>,
  Assert<Same<T.ToolName, Schemas["ToolName"]>>,
  Assert<Same<T.Usage, Schemas["Usage"]>>,
  Assert<Same<T.ModelUsage, Schemas["ModelUsage"]>>,
  Assert<Same<T.RunLimits, Schemas["RunLimits"]>>,
  Assert<Same<T.RunContext, Schemas["RunContext"]>>,
  Assert<Same<T.ModelInfo, Schemas["ModelInfo"]>>,
  Assert<Same<T.Approval, Schemas["Approval"]>>,
  Assert<Same<T.ClientTool, Schemas["ClientTool"]>>,
  Assert<Same<T.Webhook, Schemas["Webhook"]>>,
  Assert<Same<T.PendingAction, Schemas["PendingAction"]>>,
  Assert<Same<T.Run, Schemas["Run"]>>,
  Assert<Same<T.Changes, Schemas["Changes"]>>,
  Assert<Same<T.GitSeed, Schemas["GitSeed"]>>,
  Assert<Same<T.WorkspaceSeed, NonNullable<Schemas["CreateRunRequest"]["workspace"]>>>,
  Assert<Same<T.Upload, Schemas["Upload"]>>,
  Assert<Same<T.RunList, Schemas["RunList"]>>,
  Assert<Same<T.ProfileModel, Schemas["ProfileModel"]>>,
  Assert<Same<T.ScriptedModel, Schemas["ScriptedModel"]>>,
  Assert<Same<T.ScriptedResponse, Schemas["ScriptedResponse"]>>,
  Assert<Same<T.CreateRunRequest, Schemas["CreateRunRequest"]>>,
  Assert<Same<T.AgentRef, Schemas["AgentRef"]>>,
  Assert<Same<T.AcceptedScriptedModel, Schemas["AcceptedScriptedModel"]>>,
  Assert<Same<T.AgentDefinition, Schemas["AgentDefinition"]>>,
  Assert<Same<T.CreateAgentRequest, Schemas["CreateAgentRequest"]>>,
  Assert<Same<T.UpdateAgentRequest, Schemas["UpdateAgentRequest"]>>,
  Assert<Same<T.Agent, Schemas["Agent"]>>,
  Assert<Same<T.AgentList, Schemas["AgentList"]>>,
  Assert<Same<T.AgentVersionList, Schemas["AgentVersionList"]>>,
  Assert<Same<T.ActionAnswer, Schemas["ActionAnswer"]>>,
  Assert<Same<T.ActionsRequest, Schemas["ActionsRequest"]>>,
  Assert<Same<T.ToolCall, Schemas["ToolCall"]>>,
  Assert<Same<T.UserMessage, Schemas["UserMessage"]>>,
  Assert<Same<T.AssistantMessage, Schemas["AssistantMessage"]>>,
  Assert<Same<T.ToolMessage, Schemas["ToolMessage"]>>,
  Assert<Same<T.Message, Schemas["Message"]>>,
  Assert<Same<T.MessageList, Schemas["MessageList"]>>,
  Assert<Same<T.RunStartEvent, Schemas["RunStartEvent"]>>,
  Assert<Same<T.ModelStartEvent, Schemas["ModelStartEvent"]>>,
  Assert<Same<T.ModelEndEvent, Schemas["ModelEndEvent"]>>,
  Assert<Same<T.ModelErrorEvent, Schemas["ModelErrorEvent"]>>,
  Assert<Same<T.ToolStartEvent, Schemas["ToolStartEvent"]>>,
  Assert<Same<T.ToolEndEvent, Schemas["ToolEndEvent"]>>,
  Assert<Same<T.MessageEvent, Schemas["MessageEvent"]>>,
  Assert<Same<T.ActionsRequiredEvent, Schemas["ActionsRequiredEvent"]>>,
  Assert<Same<T.RunResumedEvent, Schemas["RunResumedEvent"]>>,
  Assert<Same<T.AttemptStartEvent, Schemas["AttemptStartEvent"]>>,
  Assert<Same<T.AttemptEndEvent, Schemas["AttemptEndEvent"]>>,
  Assert<Same<T.SubrunStartEvent, Schemas["SubrunStartEvent"]>>,
  Assert<Same<T.SubrunEndEvent, Schemas["SubrunEndEvent"]>>,
  Assert<Same<T.SubagentRequest, Schemas["SubagentRequest"]>>,
  Assert<Same<T.SubagentSummary, Schemas["SubagentSummary"]>>,
  Assert<Same<T.AttemptSummary, Schemas["AttemptSummary"]>>,
  Assert<Same<T.AttemptsRequest, Schemas["AttemptsRequest"]>>,
  Assert<Same<T.RunEndEvent, Schemas["RunEndEvent"]>>,
  Assert<Same<T.ModelDeltaEvent, Schemas["ModelDeltaEvent"]>>,
  Assert<Same<T.RunEvent, Schemas["Event"]>>,
  Assert<Same<T.ApiErrorCode, Schemas["ErrorCode"]>>,
  Assert<Same<T.ErrorBody, Schemas["Error"]>>,
  Assert<Same<S.Schedule, Schemas["Schedule"]>>,
  Assert<Same<S.ScheduleList, Schemas["ScheduleList"]>>,
  Assert<Same<S.CreateScheduleRequest, Schemas["CreateScheduleRequest"]>>,
  Assert<Same<S.UpdateScheduleRequest, Schemas["UpdateScheduleRequest"]>>,
];

// The operations the client calls take and answer those types.
export type Operations = [
  Assert<Same<JsonRequest<"createRun">, T.CreateRunRequest>>,
  Assert<Same<JsonAnswer<"createRun", 201>, T.Run>>,
  Assert<Same<JsonAnswer<"getRun", 200>, T.Run>>,
  Assert<Same<JsonAnswer<"listRuns", 200>, T.RunList>>,
  Assert<Same<NonNullable<Request<"listRuns">["query"]>, T.ListRunsQuery>>,
  Assert<Same<JsonAnswer<"cancelRunIdempotent", 200>, T.Run>>,
  Assert<Same<JsonAnswer<"cancelRunIdempotent", 202>, T.Run>>,
  Assert<Same<JsonRequest<"answerActions">, T.ActionsRequest>>,
  Assert<Same<JsonAnswer<"answerActions", 200>, T.Run>>,
  Assert<Same<JsonAnswer<"listMessages", 200>, T.MessageList>>,
  Assert<Same<JsonRequest<"createAgent">, T.CreateAgentRequest>>,
  Assert<Same<JsonAnswer<"createAgent", 201>, T.Agent>>,
  Assert<Same<JsonRequest<"updateAgent">, T.UpdateAgentRequest>>,
  Assert<Same<JsonAnswer<"updateAgent", 200>, T.Agent>>,
  Assert<Same<JsonAnswer<"getAgent", 200>, T.Agent>>,
  Assert<Same<JsonAnswer<"getAgentVersion", 200>, T.Agent>>,
  Assert<Same<JsonAnswer<"listAgents", 200>, T.AgentList>>,
  Assert<Same<NonNullable<Request<"listAgents">["query"]>, T.ListAgentsQuery>>,
  Assert<Same<JsonAnswer<"listAgentVersions", 200>, T.AgentVersionList>>,
  Assert<Same<NonNullable<Request<"listAgentVersions">["query"]>, T.ListAgentVersionsQuery>>,
  Assert<Same<keyof NonNullable<Request<"createRun">["query"]>, "wait" | "stream">>,
  Assert<Same<keyof NonNullable<Request<"streamEvents">["header"]>, "Last-Event-ID">>,
  Assert<Same<JsonAnswer<"createUpload", 201>, T.Upload>>,
  Assert<Same<JsonAnswer<"getUpload", 200>, T.Upload>>,
  Assert<Same<keyof NonNullable<operations["createUpload"]["requestBody"]>["content"], T.UploadContentType>>,
  Assert<Same<keyof NonNullable<Request<"getRunArchive">["query"]>, "include_git">>,
  Assert<Same<JsonRequest<"createSchedule">, S.CreateScheduleRequest>>,
  Assert<Same<JsonAnswer<"createSchedule", 201>, S.Schedule>>,
  Assert<Same<JsonAnswer<"getSchedule", 200>, S.Schedule>>,
  Assert<Same<JsonRequest<"updateSchedule">, S.UpdateScheduleRequest>>,
  Assert<Same<JsonAnswer<"updateSchedule", 200>, S.Schedule>>,
  Assert<Same<JsonAnswer<"listSchedules", 200>, S.ScheduleList>>,
  Assert<Same<JsonAnswer<"triggerSchedule", 201>, T.Run>>,
];
