"""Typed views of the API's objects: runs, their usage, pending actions and
changes, events, agents, uploads.

Each is built from the server's JSON tolerantly: a field the server adds
later is ignored, and a missing one takes its empty value. Timestamps stay
RFC 3339 strings, as the server sends them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

#: Statuses a run never leaves.
TERMINAL_STATUSES = frozenset(
    {
        "completed",
        "step_limit",
        "tool_limit",
        "aborted",
        "timeout",
        "model_error",
        "context_limit",
        "cost_limit",
        "failed",
        "interrupted",
    }
)

#: Statuses of a run that has not ended (``requires_action``: paused until
#: its pending actions are answered).
LIVE_STATUSES = frozenset({"queued", "running", "requires_action"})


@dataclass(frozen=True)
class Usage:
    """Tokens a run used; ``model_calls_with_usage`` 0 means unknown, not free.

    ``cached_input_tokens`` and ``cache_write_tokens`` are the parts of
    ``input_tokens`` read from and written to the provider's prompt cache;
    ``cost_usd`` is what the calls cost in US dollars, ``None`` when unknown
    (a model without a price).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    model_calls_with_usage: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: Optional[float] = None

    @classmethod
    def from_dict(cls, data: Optional[Mapping[str, Any]]) -> Usage:
        """A ``Usage`` from the API's ``Usage`` object (``None`` is all zeros)."""
        data = data or {}
        cost = data.get("cost_usd")
        return cls(
            input_tokens=int(data.get("input_tokens") or 0),
            output_tokens=int(data.get("output_tokens") or 0),
            model_calls_with_usage=int(data.get("model_calls_with_usage") or 0),
            cached_input_tokens=int(data.get("cached_input_tokens") or 0),
            cache_write_tokens=int(data.get("cache_write_tokens") or 0),
            cost_usd=None if cost is None else float(cost),
        )


@dataclass(frozen=True)
class PendingAction:
    """A call a paused run waits on.

    ``kind`` ``approval`` is answered with a decision (approve or deny),
    ``client_tool`` with an output or an error.
    """

    call_id: str
    kind: str
    name: str
    arguments: Any = None
    #: The child run whose call it is, when its parent lists it (a
    #: sub-agent waiting for a decision); ``None`` for the run's own.
    run_id: Optional[str] = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PendingAction:
        """A ``PendingAction`` from the API's object of that name."""
        return cls(
            call_id=str(data.get("call_id", "")),
            kind=str(data.get("kind", "")),
            name=str(data.get("name", "")),
            arguments=data.get("arguments"),
            run_id=data.get("run_id"),
        )


@dataclass(frozen=True)
class Changes:
    """The size of a run's diff: the files it touches, the lines it adds and removes."""

    files: int = 0
    insertions: int = 0
    deletions: int = 0

    @classmethod
    def from_dict(cls, data: Optional[Mapping[str, Any]]) -> Optional[Changes]:
        """``Changes`` from the API's object of that name (``None`` stays ``None``:
        the run has not ended)."""
        if data is None:
            return None
        return cls(
            files=int(data.get("files") or 0),
            insertions=int(data.get("insertions") or 0),
            deletions=int(data.get("deletions") or 0),
        )


@dataclass(frozen=True)
class AttemptSummary:
    """One attempt of a run tried several times (``attempts``): its own run,
    its number from 1, its status, and whether its checks passed on its
    workspace as it ended (``None`` until it has ended)."""

    run_id: str
    attempt: int
    status: str
    checks_passed: Optional[bool] = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AttemptSummary:
        """An ``AttemptSummary`` from the server's JSON object."""
        return cls(
            run_id=str(data["run_id"]),
            attempt=int(data["attempt"]),
            status=str(data["status"]),
            checks_passed=data.get("checks_passed"),
        )


@dataclass
class Run:
    """A run as the server describes it (the ``Run`` schema, field for field).

    Nested objects without a class of their own (``limits``, ``context``,
    ``model``, ``metadata``, ``approval``, ``client_tools``, ``webhook``,
    ``agent``, ``output_schema``) are the server's JSON as dicts. ``output``
    is the JSON document (any JSON value) the final answer of a completed
    run with an ``output_schema`` is, ``None`` otherwise; ``agent`` is
    ``{"name": ..., "version": ...}`` for a run made from an agent.
    ``changes`` counts what the run changed in its workspace (its diff) once
    it has ended, ``None`` until then. A run tried several times has its
    ``attempt_policy`` (the request's ``attempts``), its ``attempts`` and,
    once one passed, ``chosen_attempt``; each attempt is a run whose
    ``parent_run_id`` and ``attempt`` say whose attempt it is. A run a
    schedule made names it (``schedule_id``) and the tick it was made for
    (``schedule_tick``, ``None`` for a trigger's). A run that may delegate
    lists its ``subagents`` (by name: ``description``, ``workspace``,
    ``agent``) and its ``usage_total`` (its usage and its children's); a
    child a ``delegate`` call started names its ``parent_run_id`` and
    ``root_run_id``.
    """

    id: str
    status: str
    prompt: str = ""
    answer: Optional[str] = None
    output: Any = None
    error: Optional[str] = None
    steps: int = 0
    tool_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    resumes: int = 0
    limits: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    tools: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    model: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    pending_actions: list[PendingAction] = field(default_factory=list)
    approval: dict[str, Any] = field(default_factory=dict)
    client_tools: list[dict[str, Any]] = field(default_factory=list)
    mcp_servers: list[str] = field(default_factory=list)
    instructions: Optional[str] = None
    thread_id: str = ""
    previous_run_id: Optional[str] = None
    webhook: Optional[dict[str, Any]] = None
    agent: Optional[dict[str, Any]] = None
    output_schema: Optional[dict[str, Any]] = None
    changes: Optional[Changes] = None
    parent_run_id: Optional[str] = None
    attempt: Optional[int] = None
    temperature: Optional[float] = None
    attempt_policy: Optional[dict[str, Any]] = None
    attempts: Optional[list[AttemptSummary]] = None
    chosen_attempt: Optional[int] = None
    schedule_id: Optional[str] = None
    schedule_tick: Optional[str] = None
    subagents: Optional[dict[str, Any]] = None
    root_run_id: Optional[str] = None
    usage_total: Optional[Usage] = None
    created_at: str = ""
    started_at: Optional[str] = None
    finished_at: Optional[str] = None
    trace_id: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Run:
        """A ``Run`` from the server's JSON object; unknown fields are ignored."""
        return cls(
            id=str(data["id"]),
            status=str(data["status"]),
            prompt=data.get("prompt") or "",
            answer=data.get("answer"),
            output=data.get("output"),
            error=data.get("error"),
            steps=int(data.get("steps") or 0),
            tool_calls=int(data.get("tool_calls") or 0),
            usage=Usage.from_dict(data.get("usage")),
            resumes=int(data.get("resumes") or 0),
            limits=dict(data.get("limits") or {}),
            context=dict(data.get("context") or {}),
            tools=list(data.get("tools") or []),
            commands=list(data.get("commands") or []),
            model=dict(data.get("model") or {}),
            metadata=dict(data.get("metadata") or {}),
            pending_actions=[
                PendingAction.from_dict(action) for action in data.get("pending_actions") or []
            ],
            approval=dict(data.get("approval") or {}),
            client_tools=list(data.get("client_tools") or []),
            mcp_servers=list(data.get("mcp_servers") or []),
            instructions=data.get("instructions"),
            thread_id=data.get("thread_id") or "",
            previous_run_id=data.get("previous_run_id"),
            webhook=data.get("webhook"),
            agent=data.get("agent"),
            output_schema=data.get("output_schema"),
            changes=Changes.from_dict(data.get("changes")),
            parent_run_id=data.get("parent_run_id"),
            attempt=data.get("attempt"),
            temperature=data.get("temperature"),
            attempt_policy=data.get("attempt_policy"),
            attempts=(
                None
                if data.get("attempts") is None
                else [AttemptSummary.from_dict(a) for a in data["attempts"]]
            ),
            chosen_attempt=data.get("chosen_attempt"),
            schedule_id=data.get("schedule_id"),
            schedule_tick=data.get("schedule_tick"),
            subagents=data.get("subagents"),
            root_run_id=data.get("root_run_id"),
            usage_total=(
                None if data.get("usage_total") is None else Usage.from_dict(data["usage_total"])
            ),
            created_at=data.get("created_at") or "",
            started_at=data.get("started_at"),
            finished_at=data.get("finished_at"),
            trace_id=data.get("trace_id") or "",
        )

    @property
    def is_terminal(self) -> bool:
        """Whether the run has ended (its status will not change again)."""
        return self.status in TERMINAL_STATUSES

    @property
    def is_paused(self) -> bool:
        """Whether the run waits for answers to its ``pending_actions``."""
        return self.status == "requires_action"


@dataclass(frozen=True)
class RunPage:
    """One page of ``GET /v1/runs``: ``next_cursor`` is ``None`` on the last."""

    runs: list[Run]
    next_cursor: Optional[str]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunPage:
        """A ``RunPage`` from the API's ``RunList`` object."""
        return cls(
            runs=[Run.from_dict(run) for run in data.get("runs") or []],
            next_cursor=data.get("next_cursor"),
        )


@dataclass(frozen=True)
class Event:
    """One event of a run's stream.

    ``data`` is the whole event object (its type-specific fields included:
    ``message``, ``actions``, ``status``, ``answer``, ...). ``sequence`` is
    1, 2, 3, ... per run, and ``None`` for ``model_delta``, which is live only.
    """

    sequence: Optional[int]
    type: str
    run_id: str
    timestamp: str
    data: dict[str, Any]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], event_type: str = "") -> Event:
        """An ``Event`` from its JSON object (``event_type``: the SSE event name, if any)."""
        sequence = data.get("sequence")
        return cls(
            sequence=int(sequence) if sequence is not None else None,
            type=str(data.get("type") or event_type),
            run_id=str(data.get("run_id", "")),
            timestamp=str(data.get("timestamp", "")),
            data=dict(data),
        )

    @property
    def is_end(self) -> bool:
        """Whether this is the run's ``run_end``, its last event."""
        return self.type == "run_end"

    @property
    def actions(self) -> list[PendingAction]:
        """The calls an ``actions_required`` event waits on (empty for other types)."""
        return [PendingAction.from_dict(action) for action in self.data.get("actions") or []]

    @property
    def output(self) -> Any:
        """The run's ``output`` a ``run_end`` carries (``None`` without an output schema)."""
        return self.data.get("output")


@dataclass(frozen=True)
class Agent:
    """One version of an agent: a run's definition stored under a name.

    ``definition`` is the server's JSON (the fields of a run body but
    ``prompt``, ``workspace``, ``previous_run_id`` and ``agent``, as
    accepted); ``archived`` is the agent's state now, the same on every
    version.
    """

    name: str
    version: int
    description: Optional[str] = None
    definition: dict[str, Any] = field(default_factory=dict)
    created_at: str = ""
    archived: bool = False

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Agent:
        """An ``Agent`` from the API's object of that name."""
        return cls(
            name=str(data["name"]),
            version=int(data["version"]),
            description=data.get("description"),
            definition=dict(data.get("definition") or {}),
            created_at=data.get("created_at") or "",
            archived=bool(data.get("archived")),
        )


@dataclass(frozen=True)
class AgentPage:
    """One page of ``GET /v1/agents``, by name: ``next_cursor`` is ``None`` on the last."""

    agents: list[Agent]
    next_cursor: Optional[str]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AgentPage:
        """An ``AgentPage`` from the API's ``AgentList`` object."""
        return cls(
            agents=[Agent.from_dict(agent) for agent in data.get("agents") or []],
            next_cursor=data.get("next_cursor"),
        )


@dataclass(frozen=True)
class AgentVersionPage:
    """One page of an agent's versions, newest first: ``next_cursor`` is ``None`` on the last."""

    versions: list[Agent]
    next_cursor: Optional[str]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AgentVersionPage:
        """An ``AgentVersionPage`` from the API's ``AgentVersionList`` object."""
        return cls(
            versions=[Agent.from_dict(agent) for agent in data.get("versions") or []],
            next_cursor=data.get("next_cursor"),
        )


@dataclass(frozen=True)
class Upload:
    """An archive kept for runs to seed their workspaces with: pass its ``id``
    as ``workspace={"archive": upload.id}``.

    ``size`` is the archive's bytes, ``files`` the regular files it holds;
    ``expires_at`` is when retention removes it (``None``: kept until removed).
    """

    id: str
    size: int = 0
    files: int = 0
    created_at: str = ""
    expires_at: Optional[str] = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Upload:
        """An ``Upload`` from the API's object of that name."""
        return cls(
            id=str(data["id"]),
            size=int(data.get("size") or 0),
            files=int(data.get("files") or 0),
            created_at=data.get("created_at") or "",
            expires_at=data.get("expires_at"),
        )


@dataclass(frozen=True)
class Schedule:
    """A cron in a timezone, and the run body each of its ticks makes a run of.

    ``run`` is that body as the server accepted it; ``next_run_at`` is the
    next tick (``None`` while disabled), ``last_run_id`` the newest run it
    made; ``skipped_ticks`` counts ticks that made no run because the
    previous was live (``overlap="skip"``), ``refused_ticks`` those a limit
    of the tenant refused.
    """

    id: str
    cron: str
    timezone: str = "UTC"
    run: dict[str, Any] = field(default_factory=dict)
    thread: str = "new"
    overlap: str = "skip"
    enabled: bool = True
    name: Optional[str] = None
    next_run_at: Optional[str] = None
    last_run_id: Optional[str] = None
    skipped_ticks: int = 0
    refused_ticks: int = 0
    created_at: str = ""
    updated_at: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Schedule:
        """A ``Schedule`` from the API's object of that name."""
        return cls(
            id=str(data["id"]),
            cron=str(data["cron"]),
            timezone=data.get("timezone") or "UTC",
            run=dict(data.get("run") or {}),
            thread=data.get("thread") or "new",
            overlap=data.get("overlap") or "skip",
            enabled=bool(data.get("enabled", True)),
            name=data.get("name"),
            next_run_at=data.get("next_run_at"),
            last_run_id=data.get("last_run_id"),
            skipped_ticks=int(data.get("skipped_ticks") or 0),
            refused_ticks=int(data.get("refused_ticks") or 0),
            created_at=data.get("created_at") or "",
            updated_at=data.get("updated_at") or "",
        )


@dataclass(frozen=True)
class SchedulePage:
    """One page of ``GET /v1/schedules``: ``next_cursor`` is ``None`` on the last."""

    schedules: list[Schedule]
    next_cursor: Optional[str]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SchedulePage:
        """A ``SchedulePage`` from the API's ``ScheduleList`` object."""
        return cls(
            schedules=[Schedule.from_dict(item) for item in data.get("schedules") or []],
            next_cursor=data.get("next_cursor"),
        )
