"""Refusals and failures: each is an AgentRunnerError with its code."""

from __future__ import annotations

import contextlib
import uuid

import pytest
from support import TOKEN, Server, free_port, scripted

from agent_runner import AgentRunnerError, Client


def test_a_bad_body_is_invalid_request(client: Client) -> None:
    with pytest.raises(AgentRunnerError) as refused:
        client.create_run("   ")
    assert refused.value.status == 422
    assert refused.value.code == "invalid_request"
    assert "prompt" in refused.value.message
    assert str(refused.value).startswith("422 invalid_request: ")

    with pytest.raises(AgentRunnerError) as unknown_tool:
        client.create_run("hi", tools=["no_such_tool"])
    assert (unknown_tool.value.status, unknown_tool.value.code) == (422, "invalid_request")


def test_a_bad_idempotency_key(client: Client) -> None:
    with pytest.raises(AgentRunnerError) as refused:
        client.create_run("hi", idempotency_key="two words")
    assert (refused.value.status, refused.value.code) == (422, "invalid_request")

    # One that HTTP cannot carry is refused before it is sent.
    with pytest.raises(AgentRunnerError) as unsent:
        client.create_run("hi", idempotency_key="line\nbreak")
    assert (unsent.value.status, unsent.value.code) == (None, "invalid_request")


def test_an_unknown_run_is_not_found(client: Client) -> None:
    unknown = str(uuid.uuid4())
    for call in (
        lambda: client.get_run(unknown),
        lambda: client.cancel(unknown),
        lambda: client.messages(unknown),
        lambda: client.approve(unknown, "1"),
        lambda: list(client.events(unknown)),
    ):
        with pytest.raises(AgentRunnerError) as refused:
            call()
        assert (refused.value.status, refused.value.code) == (404, "not_found")
        assert refused.value.retry_after is None


def test_the_request_after_a_refused_body_goes_through(client: Client) -> None:
    # The server answers 404 before reading the body, and closes the
    # connection saying so (`Connection: close`): the next request must go
    # on another.
    unknown = str(uuid.uuid4())
    for _ in range(50):
        with pytest.raises(AgentRunnerError) as refused:
            client.approve(unknown, "1")
        assert refused.value.code == "not_found"
        with pytest.raises(AgentRunnerError) as refused:
            client.get_run(unknown)
        assert refused.value.code == "not_found"


def test_a_bad_query_is_invalid_query(client: Client) -> None:
    with pytest.raises(AgentRunnerError) as refused:
        list(client.list_runs(limit=0))
    assert (refused.value.status, refused.value.code) == (400, "invalid_query")


def test_answering_a_run_that_is_not_paused(client: Client) -> None:
    run = client.create_run("hi", model=scripted({"content": "hello"}), wait=True)
    with pytest.raises(AgentRunnerError) as refused:
        client.approve(run.id, "1")
    assert (refused.value.status, refused.value.code) == (409, "run_not_paused")


def test_an_unreachable_server() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with Client(url) as client:
        with pytest.raises(AgentRunnerError) as failed:
            client.get_run(str(uuid.uuid4()))
        with pytest.raises(AgentRunnerError) as failed_stream:
            next(client.events(str(uuid.uuid4())))
    for error in (failed.value, failed_stream.value):
        assert error.code == "unreachable" and error.status is None
        assert url in error.message
        assert "agent-runner serve" in error.message and "AGENT_RUNNER_URL" in error.message


def test_the_token_is_sent(strict_server: Server) -> None:
    with Client(strict_server.url) as anonymous, pytest.raises(AgentRunnerError) as refused:
        anonymous.get_run(str(uuid.uuid4()))
    assert (refused.value.status, refused.value.code) == (401, "unauthorized")

    # No run is made here: the next test needs the server's one slot free.
    with Client(strict_server.url, token=TOKEN) as client, pytest.raises(AgentRunnerError) as found:
        client.get_run(str(uuid.uuid4()))
    assert (found.value.status, found.value.code) == (404, "not_found")


def test_a_full_queue_says_when_to_retry(strict_server: Server) -> None:
    # The only run of this server, so that it finds the one slot free.
    with Client(strict_server.url, token=TOKEN) as client:
        busy = client.create_run("wait", model=scripted({"content": "", "delay_ms": 60_000}))
        try:
            with contextlib.closing(client.events(busy.id)) as events:
                next(event for event in events if event.type == "model_start")
            with pytest.raises(AgentRunnerError) as refused:
                client.create_run("one more")
        finally:
            client.cancel(busy.id)
        assert client.wait(busy.id).status == "aborted"
    assert (refused.value.status, refused.value.code) == (429, "queue_full")
    assert refused.value.retry_after is not None and refused.value.retry_after >= 0
