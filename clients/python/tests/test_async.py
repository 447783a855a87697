"""The async client against the real server."""

from __future__ import annotations

import uuid

import pytest
from support import LIST_THEN_DONE, Server, scripted

from agent_runner import AgentRunnerError, AsyncClient

pytestmark = pytest.mark.anyio


async def test_create_and_wait(server: Server) -> None:
    async with AsyncClient(server.url) as client:
        run = await client.create_run(
            "Inspect", model=scripted(*LIST_THEN_DONE), tools=["list_dir"], wait=True
        )
    assert (run.status, run.answer) == ("completed", "Done")
    assert (run.usage.input_tokens, run.usage.output_tokens) == (12, 3)


async def test_create_then_follow_events(server: Server) -> None:
    async with AsyncClient(server.url) as client:
        run = await client.create_run(
            "Inspect", model=scripted(*LIST_THEN_DONE), tools=["list_dir"]
        )
        events = [event async for event in client.events(run.id)]
        fetched = await client.get_run(run.id)
        messages = await client.messages(run.id)

    assert [event.sequence for event in events] == list(range(1, len(events) + 1))
    assert events[0].type == "run_start" and events[-1].is_end
    assert fetched.status == "completed" and messages[-1]["content"] == "Done"


async def test_cancel_a_live_run(server: Server) -> None:
    async with AsyncClient(server.url) as client:
        run = await client.create_run(
            "Wait a while", model=scripted({"content": "late", "delay_ms": 60_000}), tools=[]
        )
        events = client.events(run.id)
        async for event in events:
            if event.type == "model_start":
                break
        await events.aclose()

        await client.cancel(run.id)
        ended = await client.wait(run.id)
        again = await client.cancel(run.id)

    assert ended.status == "aborted" and again.status == "aborted"


async def test_pause_and_answer(server: Server) -> None:
    async with AsyncClient(server.url) as client:
        run = await client.create_run(
            "Look it up",
            client_tools=[{"name": "lookup_order"}],
            model=scripted(
                {
                    "content": "",
                    "tool_calls": [{"id": "7", "name": "lookup_order", "arguments": {}}],
                },
                {"content": "Found."},
            ),
        )
        async for event in client.events(run.id):
            for action in event.actions:
                await client.submit_output(run.id, action.call_id, "order 42: shipped")
        ended = await client.get_run(run.id)
    assert (ended.status, ended.answer) == ("completed", "Found.")


async def test_list_runs_and_errors(server: Server) -> None:
    async with AsyncClient(server.url) as client:
        first = await client.create_run("one", model=scripted({"content": "1"}), wait=True)
        second = await client.create_run(
            "two", model=scripted({"content": "2"}), previous_run_id=first.id, wait=True
        )
        runs = [run async for run in client.list_runs(thread_id=first.id, limit=1)]
        with pytest.raises(AgentRunnerError) as refused:
            await client.get_run(str(uuid.uuid4()))

    assert [run.id for run in runs] == [second.id, first.id]
    assert (refused.value.status, refused.value.code) == (404, "not_found")


async def test_agents_and_structured_output(server: Server) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    async with AsyncClient(server.url) as client:
        created = await client.create_agent(
            "async-counter",
            description="Counts",
            output_schema=schema,
            model=scripted({"content": '{"n": 1}'}),
        )
        updated = await client.update_agent(
            "async-counter", output_schema=schema, model=scripted({"content": '{"n": 2}'})
        )
        first = await client.get_agent("async-counter", version=1)
        versions = [agent async for agent in client.list_agent_versions("async-counter", limit=1)]
        page = await client.list_agent_versions_page("async-counter")
        live = [agent.name async for agent in client.list_agents(limit=1)]
        latest = await client.create_run("Count", agent="async-counter", wait=True)
        pinned = await client.create_run("Count", agent="async-counter@1", wait=True)
        runs = [run async for run in client.list_runs(agent="async-counter", limit=1)]
        with pytest.raises(AgentRunnerError) as exists:
            await client.create_agent("async-counter")
        await client.delete_agent("async-counter")
        archived = await client.get_agent("async-counter")
        archived_names = [agent.name async for agent in client.list_agents(archived=True)]
        listed = await client.list_agents_page()
        with pytest.raises(AgentRunnerError) as unknown:
            await client.get_agent("async-nobody")

    assert (created.version, updated.version, first) == (1, 2, created)
    assert [agent.version for agent in versions] == [2, 1]
    assert [agent.version for agent in page.versions] == [2, 1] and page.next_cursor is None
    assert "async-counter" in live
    assert (latest.output, latest.agent) == ({"n": 2}, {"name": "async-counter", "version": 2})
    assert (pinned.output, pinned.agent) == ({"n": 1}, {"name": "async-counter", "version": 1})
    assert latest.output_schema == schema
    assert [run.id for run in runs] == [pinned.id, latest.id]
    assert (exists.value.status, exists.value.code) == (409, "agent_exists")
    assert archived.archived and "async-counter" in archived_names
    assert "async-counter" not in [agent.name for agent in listed.agents]
    assert (unknown.value.status, unknown.value.code) == (404, "agent_not_found")
