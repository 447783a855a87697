"""The synchronous client."""

from __future__ import annotations

import time
from collections.abc import Generator, Mapping, Sequence
from types import TracebackType
from typing import Any, Optional, Union

import httpx

from ._base import (
    DEFAULT_MAX_RECONNECTS,
    Approval,
    Model,
    Settings,
    actions_body,
    approve_answer,
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
)
from ._errors import error_from_response, error_from_transport
from ._events import EventStream
from ._types import Event, Run, RunPage


class Client:
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
        previous_run_id: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        wait: bool = False,
        **extra: Any,
    ) -> Run:
        """Create a run (``POST /v1/runs``) and return it.

        The keyword arguments are the fields of the API's
        ``CreateRunRequest`` (``None`` leaves one out); ``extra`` passes any
        other field as is (``webhook``, ``mcp_servers``, ``commands``).
        ``approval`` may be a list of tool names. With ``wait=True`` the
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
    ) -> RunPage:
        """One page of runs, newest first: pass its ``next_cursor`` as ``cursor``
        for the next. ``limit`` is the page's size (the server's default 20)."""
        params = list_params(status, thread_id, limit, cursor)
        return RunPage.from_dict(json_object(self._request("GET", "/v1/runs", params=params)))

    def list_runs(
        self,
        status: Optional[str] = None,
        thread_id: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> Generator[Run, None, None]:
        """Every run (with ``status``, of ``thread_id`` when given), newest
        first, fetched ``limit`` at a time as the iteration goes on."""
        while True:
            page = self.list_runs_page(status, thread_id, limit, cursor)
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
        ``{"call_id": ..., "output": ANY}`` or ``{"call_id": ..., "error": TEXT}``.
        Returns the run: still ``requires_action`` while some are unanswered,
        else ``queued`` to resume.
        """
        return run_of(
            self._request("POST", run_path(run_id, "/actions"), json=actions_body(answers))
        )

    def approve(self, run_id: str, call_id: str) -> Run:
        """Approve the pending call ``call_id``: it runs."""
        return self.answer_actions(run_id, [approve_answer(call_id)])

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

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Optional[Mapping[str, Union[str, int]]] = None,
        headers: Optional[Mapping[str, str]] = None,
        json: Optional[Any] = None,
        timeout: Optional[httpx.Timeout] = None,
    ) -> httpx.Response:
        try:
            response = self._http.request(
                method,
                path,
                params=params,
                headers=headers,
                json=json,
                timeout=timeout or self._settings.timeout,
            )
        except httpx.TransportError as error:
            raise error_from_transport(self.base_url, error) from error
        return checked(response)
