"""The one exception the client raises, and how answers and failures become it."""

from __future__ import annotations

from typing import Any, Optional

import httpx

#: Codes the client gives failures that are not the server's answers.
UNREACHABLE = "unreachable"
TIMEOUT = "timeout"
CONNECTION_ERROR = "connection_error"
STREAM_INTERRUPTED = "stream_interrupted"
INVALID_RESPONSE = "invalid_response"
INVALID_REQUEST = "invalid_request"


class AgentRunnerError(Exception):
    """A request the server refused, or one that never got an answer.

    For a refusal, ``status`` is the HTTP status and ``code`` and ``message``
    come from the body ``{"error": {"code": ..., "message": ...}}`` (``code``
    is one of the server's ``ErrorCode`` values, such as ``not_found``,
    ``invalid_request``, ``agent_not_found`` or ``agent_exists``);
    ``retry_after`` holds the ``Retry-After`` header in seconds when the
    answer has one.

    Failures of the client's own have ``status`` ``None`` and one of these
    codes: ``unreachable`` (nothing answers at the base URL), ``timeout``,
    ``connection_error``, ``stream_interrupted`` (an event stream kept
    dropping and could not be resumed), ``invalid_response`` (an answer
    that is not what the API describes) and ``invalid_request`` (a request
    that HTTP cannot carry, such as a header value with a line break).
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: Optional[int] = None,
        retry_after: Optional[int] = None,
    ) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.status = status
        self.retry_after = retry_after

    def __str__(self) -> str:
        prefix = f"{self.status} " if self.status is not None else ""
        return f"{prefix}{self.code}: {self.message}"

    def __repr__(self) -> str:
        return (
            f"AgentRunnerError(code={self.code!r}, message={self.message!r}, "
            f"status={self.status!r}, retry_after={self.retry_after!r})"
        )


def error_from_response(response: httpx.Response) -> AgentRunnerError:
    """The error a non-2xx answer stands for; its body must have been read."""
    code = f"http_{response.status_code}"
    message = response.reason_phrase or "no message"
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
        code = str(error.get("code") or code)
        message = str(error.get("message") or message)
    return AgentRunnerError(
        code,
        message,
        status=response.status_code,
        retry_after=_retry_after(response.headers.get("retry-after")),
    )


def error_from_transport(base_url: str, error: httpx.TransportError) -> AgentRunnerError:
    """The error for a request that got no (whole) answer from ``base_url``."""
    if isinstance(error, httpx.ConnectError):
        return AgentRunnerError(
            UNREACHABLE,
            f"cannot reach the server at {base_url} ({error or 'nothing answers there'}); "
            "start one with `agent-runner serve`, or point at another with "
            "base_url or AGENT_RUNNER_URL",
        )
    if isinstance(error, httpx.LocalProtocolError):
        return AgentRunnerError(INVALID_REQUEST, f"the request cannot be sent: {error}")
    if isinstance(error, httpx.TimeoutException):
        return AgentRunnerError(
            TIMEOUT, f"the server at {base_url} did not answer in time ({error})"
        )
    return AgentRunnerError(
        CONNECTION_ERROR,
        f"the connection to {base_url} failed: {type(error).__name__}: {error}",
    )


def _retry_after(value: Optional[str]) -> Optional[int]:
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None
