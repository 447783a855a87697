"""A client of agent-runner, the HTTP service that runs AI-agent loops.

``Client`` (sync) and ``AsyncClient`` (async) create runs, follow their
events, answer their pending actions and cancel them, read what they changed
(a diff, an archive of the workspace), upload archives to seed workspaces
with, store the agents runs are made from, and the schedules that make runs on
a cron; every refusal or failure raises ``AgentRunnerError``,
which carries the error's ``code``.
"""

from ._async import AsyncClient
from ._base import DEFAULT_BASE_URL
from ._client import Client
from ._errors import AgentRunnerError
from ._types import (
    LIVE_STATUSES,
    TERMINAL_STATUSES,
    Agent,
    AgentPage,
    AgentVersionPage,
    AttemptSummary,
    Changes,
    Event,
    PendingAction,
    Run,
    RunPage,
    Schedule,
    SchedulePage,
    Upload,
    Usage,
)
from ._version import __version__

__all__ = [
    "DEFAULT_BASE_URL",
    "LIVE_STATUSES",
    "TERMINAL_STATUSES",
    "Agent",
    "AgentPage",
    "AgentRunnerError",
    "AgentVersionPage",
    "AsyncClient",
    "AttemptSummary",
    "Changes",
    "Client",
    "Event",
    "PendingAction",
    "Run",
    "RunPage",
    "Schedule",
    "SchedulePage",
    "Upload",
    "Usage",
    "__version__",
]
