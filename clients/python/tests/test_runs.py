"""Runs with the sync client: create, read, list, follow, cancel."""

from __future__ import annotations

import contextlib
import dataclasses
import uuid

import httpx
import pytest
from support import LIST_THEN_DONE, Server, scripted

from agent_runner import Client, Event, Run, Usage


def test_create_and_wait_returns_the_final_run(client: Client) -> None:
    run = client.create_run(
        "Inspect the project",
        model=scripted(*LIST_THEN_DONE),
        tools=["list_dir"],
        metadata={"ticket": "ABC-1"},
        wait=True,
    )

    assert isinstance(run, Run)
    assert run.status == "completed"
    assert run.is_terminal and not run.is_paused
    assert run.answer == "Done"
    assert run.usage == Usage(input_tokens=12, output_tokens=3, model_calls_with_usage=1)
    assert (run.steps, run.tool_calls) == (2, 1)
    assert run.tools == ["list_dir"]
    assert run.metadata == {"ticket": "ABC-1"}
    assert run.model == {"provider": "scripted"}
    assert run.thread_id == run.id and run.previous_run_id is None
    assert run.finished_at is not None


def test_events_follow_a_run_to_its_end(client: Client) -> None:
    run = client.create_run("Inspect", model=scripted(*LIST_THEN_DONE), tools=["list_dir"])
    assert run.status in ("queued", "running")

    events = list(client.events(run.id))

    assert all(isinstance(event, Event) for event in events)
    assert [event.sequence for event in events] == list(range(1, len(events) + 1))
    assert events[0].type == "run_start"
    assert events[-1].type == "run_end" and events[-1].is_end
    assert events[-1].data["status"] == "completed"
    assert events[-1].data["answer"] == "Done"
    assert {"model_start", "model_end", "tool_start", "tool_end", "message"} <= {
        event.type for event in events
    }
    assert {event.run_id for event in events} == {run.id}
    assert all(event.timestamp for event in events)
    # The run is stored as ended before its run_end is seen.
    assert client.get_run(run.id).status == "completed"


def test_events_resume_after_a_sequence(client: Client) -> None:
    run = client.create_run("Inspect", model=scripted(*LIST_THEN_DONE), tools=["list_dir"])
    events = list(client.events(run.id))

    rest = list(client.events(run.id, after=3))

    assert rest == events[3:]
    # At or past its run_end there is nothing more (the server answers 204).
    assert list(client.events(run.id, after=len(events))) == []


def test_get_run_and_messages(client: Client) -> None:
    created = client.create_run("Inspect", model=scripted(*LIST_THEN_DONE), tools=["list_dir"])
    ended = client.wait(created.id)

    assert client.get_run(created.id) == ended
    assert ended.status == "completed" and ended.created_at == created.created_at
    messages = client.messages(created.id)
    assert [message["role"] for message in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[0]["content"] == "Inspect"
    assert messages[-1]["content"] == "Done"


def test_list_runs_pages_through_a_conversation(client: Client) -> None:
    first = client.create_run("one", model=scripted({"content": "1"}), wait=True)
    second = client.create_run(
        "two", model=scripted({"content": "2"}), previous_run_id=first.id, wait=True
    )
    third = client.create_run(
        "three", model=scripted({"content": "3"}), previous_run_id=second.id, wait=True
    )
    assert third.thread_id == first.id

    runs = list(client.list_runs(thread_id=first.id, limit=1))

    assert [run.id for run in runs] == [third.id, second.id, first.id]
    page = client.list_runs_page(thread_id=first.id, limit=1)
    assert [run.id for run in page.runs] == [third.id]
    assert page.next_cursor is not None
    rest = client.list_runs_page(thread_id=first.id, limit=2, cursor=page.next_cursor)
    assert [run.id for run in rest.runs] == [second.id, first.id]
    completed = list(client.list_runs(status="completed", thread_id=first.id))
    assert len(completed) == 3


def test_cancel_a_live_run_and_again(client: Client) -> None:
    run = client.create_run(
        "Wait a while",
        model=scripted({"content": "late", "delay_ms": 60_000}),
        tools=[],
    )
    with contextlib.closing(client.events(run.id)) as events:
        for event in events:
            if event.type == "model_start":
                break

    accepted = client.cancel(run.id)
    assert accepted.id == run.id

    ended = client.wait(run.id)
    assert ended.status == "aborted"
    again = client.cancel(run.id)
    assert again.status == "aborted" and again.finished_at == ended.finished_at


def test_idempotency_key_returns_the_first_run(client: Client) -> None:
    key = f"python-{uuid.uuid4()}"
    model = scripted({"content": "once"})

    first = client.create_run("once", model=model, idempotency_key=key, wait=True)
    repeat = client.create_run("once", model=model, idempotency_key=key)

    assert repeat.id == first.id


def test_base_url_from_the_environment(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_RUNNER_URL", server.url + "/")
    with Client() as client:
        assert client.base_url == server.url
        run = client.create_run("hi", model=scripted({"content": "hello"}), wait=True)
        assert run.answer == "hello"


def test_run_fields_are_the_schema_properties(server: Server) -> None:
    document = httpx.get(f"{server.url}/openapi.json").json()
    properties = document["components"]["schemas"]["Run"]["properties"]

    assert {field.name for field in dataclasses.fields(Run)} == set(properties)


def test_a_run_of_attempts_lists_them_and_takes_the_chosen_one() -> None:
    server = Server('[commands.check]\nprogram = "true"\ncheck = true\n')
    try:
        with Client(server.url) as client:
            run = client.create_run(
                "try twice",
                model={"scripted": [{"content": "done"}]},
                commands=["check"],
                attempts={"n": 2, "until": "all"},
                wait=True,
            )
            assert run.status == "completed"
            assert run.chosen_attempt == 1
            assert run.attempt_policy == {"n": 2, "until": "all"}
            assert run.attempts is not None
            assert [(a.attempt, a.checks_passed) for a in run.attempts] == [(1, True), (2, True)]
            children = sorted(client.list_runs(parent_run_id=run.id), key=lambda r: r.attempt or 0)
            assert [child.attempt for child in children] == [1, 2]
            assert all(child.parent_run_id == run.id for child in children)
            assert children[1].temperature == 0.8
    finally:
        server.stop()
