"""The synchronous client."""

from __future__ import annotations

import os
import time
from collections.abc import Generator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Optional, Union

import httpx

from ._base import (
    DEFAULT_MAX_RECONNECTS,
    Approval,
    Model,
    Settings,
    actions_body,
    agent_body,
    agent_list_params,
    agent_of,
    agent_path,
    agent_version_path,
    approve_answer,
    archive_params,
    archive_type,
    checked,
    create_body,
    create_headers,
    create_params,
    deny_answer,
    error_answer,
    json_object,
    list_params,
    output_answer,
    run_of,
    run_path,
    text_of,
    upload_headers,
    upload_of,
    upload_path,
)
from ._errors import error_from_response, error_from_transport
from ._events import EventStream
from ._schedules import SchedulesMixin
from ._types import Agent, AgentPage, AgentVersionPage, Event, Run, RunPage, Upload


class Client(SchedulesMixin):
    """A client of an agent-runner server, over one pool of connections.

    ``base_url`` defaults to ``AGENT_RUNNER_URL``, then to
    ``http://127.0.0.1:8080``; ``token`` (sent as ``Authorization: Bearer``)
    to ``AGENT_RUNNER_TOKEN``. ``timeout`` bounds each request in seconds,
    except ``create_run(..., wait=True)``, which waits as long as the run
    takes, and event streams, which may stay idle for a minute.
    ``max_reconnects`` is how often in a row an event stream reconnects
    without getting an event before it gives up.

    Every non-2xx answer, and every request that gets no answer, raises
    ``AgentRunnerError``. Use it as a context manager, or call ``close()``.
    """

    def __init__(
        self,
        base_url: Optional[str] = None,
        token: Optional[str] = None,
        *,
        timeout: float = 30.0,
        max_reconnects: int = DEFAULT_MAX_RECONNECTS,
    ) -> None:
        self._settings = Settings(base_url, token, timeout, max_reconnects)
        self._http = httpx.Client(
            base_url=self._settings.base_url,
            headers=self._settings.headers,
            timeout=self._settings.timeout,
        )

    @property
    def base_url(self) -> str:
        """The server's URL, without a trailing slash."""
        return self._settings.base_url

    def close(self) -> None:
        """Close the client's connections."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        self.close()

    def create_run(
        self,
        prompt: str,
        *,
        model: Optional[Model] = None,
        tools: Optional[Sequence[str]] = None,
        instructions: Optional[str] = None,
        workspace: Optional[Mapping[str, Any]] = None,
        limits: Optional[Mapping[str, Any]] = None,
        context: Optional[Mapping[str, Any]] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        approval: Optional[Approval] = None,
        client_tools: Optional[Sequence[Mapping[str, Any]]] = None,
        output_schema: Optional[Mapping[str, Any]] = None,
        agent: Optional[str] = None,
        previous_run_id: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        wait: bool = False,
        **extra: Any,
    ) -> Run:
        """Create a run (``POST /v1/runs``) and return it.

        The keyword arguments are the fields of the API's
        ``CreateRunRequest`` (``None`` leaves one out); ``extra`` passes any
        other field as is (``webhook``, ``mcp_servers``, ``commands``,
        ``attempts``, ``subagents``).
        ``approval`` may be a list of tool names. ``agent`` names a stored
        agent to start from (``"NAME"``, its latest version, or
        ``"NAME@VERSION"``): the fields given replace its definition's
        (``limits`` and ``context`` key by key). With ``output_schema`` (a
        JSON Schema) the final answer must be one JSON document valid under
        it, which the run's ``output`` then is. With ``wait=True`` the
        answer comes once the run has ended, in its final state; without,
        at once (``queued`` or ``running``). ``idempotency_key`` makes a
        repeat of the same request return the first run.
        """
        fields = {
            "model": model,
            "tools": tools,
            "instructions": instructions,
            "workspace": workspace,
            "limits": limits,
            "context": context,
            "metadata": metadata,
            "approval": approval,
            "client_tools": client_tools,
            "output_schema": output_schema,
            "agent": agent,
            "previous_run_id": previous_run_id,
            **extra,
        }
        response = self._request(
            "POST",
            "/v1/runs",
            params=create_params(wait),
            headers=create_headers(idempotency_key),
            json=create_body(prompt, fields),
            timeout=self._settings.wait_timeout if wait else self._settings.timeout,
        )
        return run_of(response)

    def get_run(self, run_id: str) -> Run:
        """The run ``run_id`` as it stands."""
        return run_of(self._request("GET", run_path(run_id)))

    def list_runs_page(
        self,
        status: Optional[str] = None,
        thread_id: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
        agent: Optional[str] = None,
        parent_run_id: Optional[str] = None,
        schedule_id: Optional[str] = None,
    ) -> RunPage:
        """One page of runs, newest first: pass its ``next_cursor`` as ``cursor``
        for the next. ``limit`` is the page's size (the server's default 20);
        ``agent`` keeps the runs made from that agent (any of its versions),
        ``parent_run_id`` the attempts of that run, ``schedule_id`` the runs
        that schedule made."""
        params = list_params(
            status, thread_id, limit, cursor, agent, parent_run_id, schedule_id
        )
        return RunPage.from_dict(json_object(self._request("GET", "/v1/runs", params=params)))

    def list_runs(
        self,
        status: Optional[str] = None,
        thread_id: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
        agent: Optional[str] = None,
        parent_run_id: Optional[str] = None,
        schedule_id: Optional[str] = None,
    ) -> Generator[Run, None, None]:
        """Every run (with ``status``, of ``thread_id``, made from ``agent``,
        attempts of ``parent_run_id``, when given), newest first, fetched
        ``limit`` at a time as the iteration goes on."""
        while True:
            page = self.list_runs_page(
                status, thread_id, limit, cursor, agent, parent_run_id, schedule_id
            )
            yield from page.runs
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def cancel(self, run_id: str) -> Run:
        """Cancel run ``run_id`` (``POST /v1/runs/{id}/cancel``).

        A live run is told to stop and ends ``aborted`` promptly (a paused
        or queued one at once); the answer is the run as it stands. A run
        that has ended is returned as it ended, so the call may be repeated.
        """
        return run_of(self._request("POST", run_path(run_id, "/cancel")))

    def answer_actions(self, run_id: str, answers: Sequence[Mapping[str, Any]]) -> Run:
        """Answer some or all of a paused run's pending actions.

        Each answer is ``{"call_id": ..., "decision": "approve"}``,
        ``{"call_id": ..., "decision": "deny", "reason": ...}``,
        ``{"call_id": ..., "output": ANY}`` or ``{"call_id": ..., "error": TEXT}``;
        through a parent that lists a sub-agent's action, each may name the
        child's ``run_id``.
        Returns the run: still ``requires_action`` while some are unanswered,
        else ``queued`` to resume.
        """
        return run_of(
            self._request("POST", run_path(run_id, "/actions"), json=actions_body(answers))
        )

    def approve(
        self, run_id: str, call_id: str, arguments: Optional[Mapping[str, Any]] = None
    ) -> Run:
        """Approve the pending call ``call_id``: it runs, with ``arguments`` in
        place of the model's when given (an edited approval, checked against
        the tool's schema)."""
        return self.answer_actions(run_id, [approve_answer(call_id, arguments)])

    def deny(self, run_id: str, call_id: str, reason: Optional[str] = None) -> Run:
        """Deny the pending call ``call_id``: the model is told it was denied."""
        return self.answer_actions(run_id, [deny_answer(call_id, reason)])

    def submit_output(self, run_id: str, call_id: str, output: Any) -> Run:
        """Give the client tool call ``call_id`` its result (any JSON value)."""
        return self.answer_actions(run_id, [output_answer(call_id, output)])

    def submit_error(self, run_id: str, call_id: str, error: str) -> Run:
        """Fail the client tool call ``call_id`` with ``error``."""
        return self.answer_actions(run_id, [error_answer(call_id, error)])

    def messages(self, run_id: str) -> list[dict[str, Any]]:
        """The run's transcript so far: its ``Message`` objects, in order."""
        body = json_object(self._request("GET", run_path(run_id, "/messages")))
        return list(body.get("messages") or [])

    def events(self, run_id: str, after: Optional[int] = None) -> Generator[Event, None, None]:
        """The run's events, from the first (or after sequence ``after``),
        live as they happen, up to and with ``run_end``.

        A dropped connection is resumed after the last event seen, with
        ``Last-Event-ID``, so that no event comes twice and none is missed
        (``model_delta`` events, live only, may be). Nothing is yielded when
        the run ended at or before ``after``. To stop early, ``close()`` the
        generator (or use ``contextlib.closing``) so that its connection closes.
        """
        stream = EventStream(run_id, after, self._settings.max_reconnects)
        path = run_path(run_id, "/events")
        while True:
            try:
                with self._http.stream(
                    "GET",
                    path,
                    headers=stream.request_headers(),
                    timeout=self._settings.stream_timeout,
                ) as response:
                    if response.status_code == 204:
                        return
                    if not response.is_success:
                        response.read()
                        raise error_from_response(response)
                    stream.opened(response.headers.get("content-type", ""))
                    for chunk in response.iter_bytes():
                        yield from stream.feed(chunk)
                        if stream.ended:
                            return
                cause = "the stream closed before run_end"
            except httpx.TransportError as error:
                if not stream.connected:
                    raise error_from_transport(self.base_url, error) from error
                cause = f"{type(error).__name__}: {error}"
            time.sleep(stream.dropped(cause))

    def wait(self, run_id: str) -> Run:
        """The run once it has ended (following its events; a paused run is
        waited for until it is answered and ends)."""
        for _ in self.events(run_id):
            pass
        return self.get_run(run_id)

    def diff(self, run_id: str) -> str:
        """The run's workspace against how it started, as a git-style unified
        diff (``GET /v1/runs/{id}/diff``): ``""`` when nothing changed. A live
        run's too, as its workspace is now; ``git apply`` applies it to the
        starting tree. The ended run's ``changes`` counts it."""
        return text_of(self._request("GET", run_path(run_id, "/diff")))

    def archive(self, run_id: str, *, include_git: bool = False) -> bytes:
        """The run's workspace as a ``.tar.gz`` (``GET /v1/runs/{id}/archive``),
        without ``.git`` unless ``include_git``. It counts against the
        tenant's concurrent downloads (``429 too_many_downloads`` beyond
        them). ``save_archive`` writes it to a file as it comes instead."""
        response = self._request(
            "GET", run_path(run_id, "/archive"), params=archive_params(include_git)
        )
        return response.content

    def save_archive(
        self,
        run_id: str,
        path: Union[str, os.PathLike[str]],
        *,
        include_git: bool = False,
    ) -> int:
        """Write the run's workspace as a ``.tar.gz`` to the file ``path`` as it
        comes, without holding it whole; returns the bytes written. As
        ``archive`` otherwise. The download goes to ``PATH.part`` first and
        replaces ``path`` once whole: a failed one leaves ``path`` as it was."""
        target = Path(path)
        partial = target.with_name(target.name + ".part")
        written = 0
        opened = False
        try:
            with self._http.stream(
                "GET",
                run_path(run_id, "/archive"),
                params=archive_params(include_git),
                timeout=self._settings.stream_timeout,
            ) as response:
                if not response.is_success:
                    response.read()
                    raise error_from_response(response)
                with open(partial, "wb") as file:
                    opened = True
                    for chunk in response.iter_bytes():
                        file.write(chunk)
                        written += len(chunk)
        except httpx.TransportError as error:
            if opened:
                partial.unlink(missing_ok=True)
            raise error_from_transport(self.base_url, error) from error
        except BaseException:
            if opened:
                partial.unlink(missing_ok=True)
            raise
        os.replace(partial, target)
        return written

    def upload(
        self,
        data: bytes,
        content_type: Optional[str] = None,
        *,
        filename: Optional[str] = None,
    ) -> Upload:
        """Upload a ``.tar.gz`` or ``.zip`` archive (``POST /v1/uploads``) for
        runs to start from: ``create_run(..., workspace={"archive": upload.id})``.

        ``content_type`` says which kind it is (``application/gzip`` or
        ``application/zip``); without it, ``filename`` does (ending
        ``.tar.gz``, ``.tgz`` or ``.zip``), and neither is a ``ValueError``.
        An entry that would escape the workspace, or a corrupt archive, is
        ``422 invalid_archive``; nothing is kept then.
        """
        headers = upload_headers(content_type, filename)
        return upload_of(self._request("POST", "/v1/uploads", headers=headers, content=data))

    def upload_file(
        self, path: Union[str, os.PathLike[str]], content_type: Optional[str] = None
    ) -> Upload:
        """Upload the archive at ``path``, its kind told by its name
        (``.tar.gz``, ``.tgz`` or ``.zip``) unless ``content_type`` says."""
        content_type = content_type or archive_type(path)
        return self.upload(Path(path).read_bytes(), content_type)

    def get_upload(self, upload_id: str) -> Upload:
        """The upload ``upload_id``; an unknown or expired one is ``404 upload_not_found``."""
        return upload_of(self._request("GET", upload_path(upload_id)))

    def delete_upload(self, upload_id: str) -> None:
        """Remove the upload ``upload_id`` (``DELETE /v1/uploads/{id}``): runs
        can no longer name it."""
        self._request("DELETE", upload_path(upload_id))

    def create_agent(
        self,
        name: str,
        *,
        description: Optional[str] = None,
        model: Optional[Model] = None,
        tools: Optional[Sequence[str]] = None,
        instructions: Optional[str] = None,
        limits: Optional[Mapping[str, Any]] = None,
        context: Optional[Mapping[str, Any]] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        approval: Optional[Approval] = None,
        client_tools: Optional[Sequence[Mapping[str, Any]]] = None,
        output_schema: Optional[Mapping[str, Any]] = None,
        **extra: Any,
    ) -> Agent:
        """Store an agent (``POST /v1/agents``) and return its first version.

        The keyword arguments are its description and its definition: the
        fields of a run body (as ``create_run`` takes them) but ``prompt``,
        ``workspace``, ``previous_run_id`` and ``agent``, validated as a
        run's. A live agent of that name is ``409 agent_exists``; an
        archived one is brought back, as its next version.
        """
        fields = {
            "description": description,
            "model": model,
            "tools": tools,
            "instructions": instructions,
            "limits": limits,
            "context": context,
            "metadata": metadata,
            "approval": approval,
            "client_tools": client_tools,
            "output_schema": output_schema,
            **extra,
        }
        return agent_of(self._request("POST", "/v1/agents", json=agent_body(name, fields)))

    def update_agent(
        self,
        name: str,
        *,
        description: Optional[str] = None,
        model: Optional[Model] = None,
        tools: Optional[Sequence[str]] = None,
        instructions: Optional[str] = None,
        limits: Optional[Mapping[str, Any]] = None,
        context: Optional[Mapping[str, Any]] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        approval: Optional[Approval] = None,
        client_tools: Optional[Sequence[Mapping[str, Any]]] = None,
        output_schema: Optional[Mapping[str, Any]] = None,
        **extra: Any,
    ) -> Agent:
        """Make the next version of agent ``name`` (``PUT /v1/agents/{name}``)
        from the same fields as ``create_agent``, and return it. The versions
        before it stay as they were."""
        fields = {
            "description": description,
            "model": model,
            "tools": tools,
            "instructions": instructions,
            "limits": limits,
            "context": context,
            "metadata": metadata,
            "approval": approval,
            "client_tools": client_tools,
            "output_schema": output_schema,
            **extra,
        }
        return agent_of(self._request("PUT", agent_path(name), json=agent_body(None, fields)))

    def get_agent(self, name: str, version: Optional[int] = None) -> Agent:
        """Agent ``name``'s latest version, or its ``version`` (an archived
        agent's too, with ``archived`` true)."""
        return agent_of(self._request("GET", agent_version_path(name, version)))

    def list_agents_page(
        self,
        archived: Optional[bool] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> AgentPage:
        """One page of agents (each its latest version), by name: the live
        ones, or with ``archived=True`` the archived ones. Pass its
        ``next_cursor`` as ``cursor`` for the next."""
        params = agent_list_params(archived, limit, cursor)
        return AgentPage.from_dict(json_object(self._request("GET", "/v1/agents", params=params)))

    def list_agents(
        self,
        archived: Optional[bool] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> Generator[Agent, None, None]:
        """Every agent (live, or archived with ``archived=True``), by name,
        fetched ``limit`` at a time as the iteration goes on."""
        while True:
            page = self.list_agents_page(archived, limit, cursor)
            yield from page.agents
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def list_agent_versions_page(
        self,
        name: str,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> AgentVersionPage:
        """One page of agent ``name``'s versions, newest first: pass its
        ``next_cursor`` as ``cursor`` for the next."""
        params = agent_list_params(None, limit, cursor)
        response = self._request("GET", agent_path(name, "/versions"), params=params)
        return AgentVersionPage.from_dict(json_object(response))

    def list_agent_versions(
        self,
        name: str,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> Generator[Agent, None, None]:
        """Every version of agent ``name``, newest first, fetched ``limit`` at
        a time as the iteration goes on."""
        while True:
            page = self.list_agent_versions_page(name, limit, cursor)
            yield from page.versions
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def delete_agent(self, name: str) -> None:
        """Archive agent ``name`` (``DELETE /v1/agents/{name}``): runs can no
        longer name it, its versions stay readable, the runs made from it
        keep their record. Archiving it again is no error; ``create_agent``
        with its name brings it back."""
        self._request("DELETE", agent_path(name))

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Optional[Mapping[str, Union[str, int]]] = None,
        headers: Optional[Mapping[str, str]] = None,
        json: Optional[Any] = None,
        content: Optional[bytes] = None,
        timeout: Optional[httpx.Timeout] = None,
    ) -> httpx.Response:
        try:
            response = self._http.request(
                method,
                path,
                params=params,
                headers=headers,
                json=json,
                content=content,
                timeout=timeout or self._settings.timeout,
            )
        except httpx.TransportError as error:
            raise error_from_transport(self.base_url, error) from error
        return checked(response)
