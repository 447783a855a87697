"""A client of agent-runner, the HTTP service that runs AI-agent loops.

``Client`` (sync) and ``AsyncClient`` (async) create runs, follow their
events, answer their pending actions and cancel them; every refusal or
failure raises ``AgentRunnerError``, which carries the error's ``code``.
"""

from ._async import AsyncClient
from ._base import DEFAULT_BASE_URL
from ._client import Client
from ._errors import AgentRunnerError
from ._types import (
    LIVE_STATUSES,
    TERMINAL_STATUSES,
    Event,
    PendingAction,
    Run,
    RunPage,
    Usage,
)
from ._version import __version__

__all__ = [
    "DEFAULT_BASE_URL",
    "LIVE_STATUSES",
    "TERMINAL_STATUSES",
    "AgentRunnerError",
    "AsyncClient",
    "Client",
    "Event",
    "PendingAction",
    "Run",
    "RunPage",
    "Usage",
    "__version__",
]
