"""What the sync and async clients share: settings, paths, bodies, answers."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union
from urllib.parse import quote

import httpx

from ._errors import INVALID_RESPONSE, AgentRunnerError, error_from_response
from ._types import Agent, Run, Schedule, Upload
from ._version import __version__

#: The server when neither ``base_url`` nor ``AGENT_RUNNER_URL`` names one.
DEFAULT_BASE_URL = "http://127.0.0.1:8080"

#: Seconds an event stream may stay silent before it counts as dropped. The
#: server sends a keep-alive comment every 15 s while a stream is idle.
STREAM_READ_TIMEOUT = 60.0

#: Drops in a row, without an event in between, that an event stream
#: reconnects after before it gives up.
DEFAULT_MAX_RECONNECTS = 5

#: The ``model`` of a run: a profile's name, ``{"profile": NAME}`` or
#: ``{"scripted": [RESPONSE, ...]}``.
Model = Union[str, Mapping[str, Any]]

#: The ``Content-Type`` of each kind of archive ``POST /v1/uploads`` takes, by
#: the end of its file name.
ARCHIVE_TYPES = (
    (".tar.gz", "application/gzip"),
    (".tgz", "application/gzip"),
    (".zip", "application/zip"),
)

#: Tools whose calls wait for a decision: ``["write_file"]`` (``["*"]``: all),
#: or the API's ``{"tools": [...]}``.
Approval = Union[Sequence[str], Mapping[str, Any]]


class Settings:
    """A client's resolved base URL, headers and timeouts."""

    def __init__(
        self,
        base_url: Optional[str],
        token: Optional[str],
        timeout: float,
        max_reconnects: int,
    ) -> None:
        base_url = base_url or os.environ.get("AGENT_RUNNER_URL") or DEFAULT_BASE_URL
        self.base_url = base_url.rstrip("/")
        token = token if token is not None else os.environ.get("AGENT_RUNNER_TOKEN")
        self.headers = {"user-agent": f"agent-runner-client-python/{__version__}"}
        if token:
            self.headers["authorization"] = f"Bearer {token}"
        self.timeout = httpx.Timeout(timeout)
        # A run waited for may take as long as its budgets allow.
        self.wait_timeout = httpx.Timeout(timeout, read=None)
        self.stream_timeout = httpx.Timeout(timeout, read=max(timeout, STREAM_READ_TIMEOUT))
        self.max_reconnects = max_reconnects


def run_path(run_id: str, suffix: str = "") -> str:
    """The path of run ``run_id`` (percent-encoded), with ``suffix``."""
    return f"/v1/runs/{quote(str(run_id), safe='')}{suffix}"


def agent_path(name: str, suffix: str = "") -> str:
    """The path of agent ``name`` (percent-encoded), with ``suffix``."""
    return f"/v1/agents/{quote(str(name), safe='')}{suffix}"


def agent_version_path(name: str, version: Optional[int]) -> str:
    """The path of agent ``name``'s latest version, or of ``version`` of it."""
    if version is None:
        return agent_path(name)
    return agent_path(name, f"/versions/{int(version)}")


def schedule_path(schedule_id: str, suffix: str = "") -> str:
    """The path of schedule ``schedule_id`` (percent-encoded), with ``suffix``."""
    return f"/v1/schedules/{quote(str(schedule_id), safe='')}{suffix}"


def upload_path(upload_id: str) -> str:
    """The path of upload ``upload_id`` (percent-encoded)."""
    return f"/v1/uploads/{quote(str(upload_id), safe='')}"


def archive_type(filename: Union[str, os.PathLike[str]]) -> str:
    """The ``Content-Type`` of an archive named ``filename``: ``.tar.gz`` and
    ``.tgz`` are gzip-compressed tars, ``.zip`` zips (in any case). Any other
    name is a ``ValueError``."""
    name = os.fspath(filename).lower()
    for suffix, content_type in ARCHIVE_TYPES:
        if name.endswith(suffix):
            return content_type
    raise ValueError(
        f"cannot tell the kind of archive {os.fspath(filename)!r}: give a content_type, "
        "or a name ending .tar.gz, .tgz or .zip"
    )


def upload_headers(content_type: Optional[str], filename: Optional[str]) -> dict[str, str]:
    """The headers of ``POST /v1/uploads``: ``content_type``, or the one
    ``filename`` tells."""
    if content_type is None:
        if filename is None:
            raise ValueError(
                "upload needs a content_type, or a filename ending .tar.gz, .tgz or .zip"
            )
        content_type = archive_type(filename)
    return {"content-type": content_type}


def archive_params(include_git: bool) -> dict[str, str]:
    """The query of ``GET /v1/runs/{id}/archive``."""
    return {"include_git": "true"} if include_git else {}


def _fields(body: dict[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` with every field of ``fields`` that is not ``None``."""
    for name, value in fields.items():
        if value is None:
            continue
        if name == "approval" and not isinstance(value, Mapping):
            value = {"tools": [value] if isinstance(value, str) else list(value)}
        body[name] = value
    return body


def create_body(prompt: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The body of ``POST /v1/runs``: ``prompt`` and every field that is not ``None``."""
    return _fields({"prompt": prompt}, fields)


def schedule_body(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The body of ``POST /v1/schedules``: every field that is not ``None``."""
    return _fields({}, fields)


def schedule_of(response: httpx.Response) -> Schedule:
    """The schedule object ``response`` carries."""
    data = json_object(response)
    if "id" not in data or "cron" not in data:
        raise AgentRunnerError(
            INVALID_RESPONSE,
            f"{response.request.method} {response.request.url.path} answered without a schedule",
            status=response.status_code,
        )
    return Schedule.from_dict(data)


def agent_body(name: Optional[str], fields: Mapping[str, Any]) -> dict[str, Any]:
    """The body of ``POST /v1/agents`` (``name`` given) or ``PUT /v1/agents/{name}``
    (``None``): every field that is not ``None``."""
    return _fields({} if name is None else {"name": name}, fields)


def create_params(wait: bool) -> dict[str, str]:
    """The query of ``POST /v1/runs``."""
    return {"wait": "true"} if wait else {}


def create_headers(idempotency_key: Optional[str]) -> dict[str, str]:
    """The extra headers of ``POST /v1/runs``."""
    return {"idempotency-key": idempotency_key} if idempotency_key is not None else {}


def list_params(
    status: Optional[str],
    thread_id: Optional[str],
    limit: Optional[int],
    cursor: Optional[str],
    agent: Optional[str] = None,
    parent_run_id: Optional[str] = None,
    schedule_id: Optional[str] = None,
) -> dict[str, Union[str, int]]:
    """The query of ``GET /v1/runs``, without the parameters not given."""
    given = {
        "status": status,
        "thread_id": thread_id,
        "agent": agent,
        "parent_run_id": parent_run_id,
        "schedule_id": schedule_id,
        "limit": limit,
        "cursor": cursor,
    }
    return {name: value for name, value in given.items() if value is not None}


def agent_list_params(
    archived: Optional[bool],
    limit: Optional[int],
    cursor: Optional[str],
) -> dict[str, Union[str, int]]:
    """The query of ``GET /v1/agents`` (``archived`` only when given), or of an
    agent's versions (``None``), without the parameters not given."""
    params: dict[str, Union[str, int]] = {}
    if archived is not None:
        params["archived"] = "true" if archived else "false"
    if limit is not None:
        params["limit"] = limit
    if cursor is not None:
        params["cursor"] = cursor
    return params


def approve_answer(call_id: str, arguments: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """The answer that approves call ``call_id`` (with ``arguments`` in place
    of the model's, when given)."""
    answer: dict[str, Any] = {"call_id": call_id, "decision": "approve"}
    if arguments is not None:
        answer["arguments"] = dict(arguments)
    return answer


def deny_answer(call_id: str, reason: Optional[str]) -> dict[str, Any]:
    """The answer that denies call ``call_id`` (the model sees ``Denied: REASON``)."""
    answer: dict[str, Any] = {"call_id": call_id, "decision": "deny"}
    if reason is not None:
        answer["reason"] = reason
    return answer


def output_answer(call_id: str, output: Any) -> dict[str, Any]:
    """The answer that gives client tool call ``call_id`` its result."""
    return {"call_id": call_id, "output": output}


def error_answer(call_id: str, error: str) -> dict[str, Any]:
    """The answer that fails client tool call ``call_id`` with ``error``."""
    return {"call_id": call_id, "error": error}


def actions_body(answers: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The body of ``POST /v1/runs/{id}/actions``."""
    return {"actions": [dict(answer) for answer in answers]}


def checked(response: httpx.Response) -> httpx.Response:
    """``response`` if it is a 2xx, else the ``AgentRunnerError`` it stands for."""
    if not response.is_success:
        raise error_from_response(response)
    return response


def json_object(response: httpx.Response) -> dict[str, Any]:
    """The JSON object ``response`` carries."""
    try:
        value = response.json()
    except ValueError as error:
        raise AgentRunnerError(
            INVALID_RESPONSE,
            f"{response.request.method} {response.request.url.path} answered "
            f"{response.status_code} with a body that is not JSON",
            status=response.status_code,
        ) from error
    if not isinstance(value, dict):
        raise AgentRunnerError(
            INVALID_RESPONSE,
            f"{response.request.method} {response.request.url.path} answered "
            f"{response.status_code} with JSON that is not an object",
            status=response.status_code,
        )
    return value


def agent_of(response: httpx.Response) -> Agent:
    """The agent object ``response`` carries."""
    data = json_object(response)
    if "name" not in data or "version" not in data:
        raise AgentRunnerError(
            INVALID_RESPONSE,
            f"{response.request.method} {response.request.url.path} answered without an agent",
            status=response.status_code,
        )
    return Agent.from_dict(data)


def upload_of(response: httpx.Response) -> Upload:
    """The upload object ``response`` carries."""
    data = json_object(response)
    if "id" not in data or "size" not in data:
        raise AgentRunnerError(
            INVALID_RESPONSE,
            f"{response.request.method} {response.request.url.path} answered without an upload",
            status=response.status_code,
        )
    return Upload.from_dict(data)


def text_of(response: httpx.Response) -> str:
    """The body of ``response`` as text (UTF-8, as the server sends it; a
    byte that is not is replaced)."""
    return response.content.decode("utf-8", errors="replace")


def run_of(response: httpx.Response) -> Run:
    """The run object ``response`` carries."""
    data = json_object(response)
    if "id" not in data or "status" not in data:
        raise AgentRunnerError(
            INVALID_RESPONSE,
            f"{response.request.method} {response.request.url.path} answered without a run",
            status=response.status_code,
        )
    return Run.from_dict(data)
