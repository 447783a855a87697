"""Schedules with both clients: one made, read, listed, changed, triggered
and deleted; its runs listed by it; a busy thread's follow-up. (The ticks
themselves are the server's suite's: tests/api/schedules.rs.)"""

from __future__ import annotations

from typing import Any

import pytest
from support import Server, scripted

from agent_runner import AgentRunnerError, AsyncClient, Client, Schedule, SchedulePage

QUICK: dict[str, Any] = {"prompt": "tick", "tools": [], "model": scripted({"content": "ticked"})}


def test_a_schedule_is_made_read_listed_changed_triggered_and_deleted(client: Client) -> None:
    made = client.create_schedule(
        "0 9 * * 1-5", QUICK, timezone="Europe/Berlin", name="morning"
    )
    assert isinstance(made, Schedule)
    assert (made.cron, made.timezone, made.thread, made.overlap) == (
        "0 9 * * 1-5",
        "Europe/Berlin",
        "new",
        "skip",
    )
    assert made.enabled and made.next_run_at and made.last_run_id is None
    assert client.get_schedule(made.id) == made
    assert made.id in [schedule.id for schedule in client.list_schedules(limit=1)]
    page = client.list_schedules_page(limit=100)
    assert isinstance(page, SchedulePage)

    paused = client.update_schedule(made.id, enabled=False, name=None)
    assert (paused.enabled, paused.next_run_at, paused.name) == (False, None, None)
    run = client.trigger_schedule(made.id)
    assert (run.schedule_id, run.schedule_tick) == (made.id, None)
    assert client.wait(run.id).answer == "ticked"
    assert [r.id for r in client.list_runs(schedule_id=made.id)] == [run.id]
    assert client.get_schedule(made.id).last_run_id == run.id

    with pytest.raises(AgentRunnerError) as refused:
        client.create_schedule("nine o'clock", QUICK)
    assert (refused.value.status, refused.value.code) == (422, "invalid_request")
    assert "cron" in refused.value.message

    client.delete_schedule(made.id)
    with pytest.raises(AgentRunnerError) as gone:
        client.get_schedule(made.id)
    assert gone.value.status == 404


def test_a_follow_up_queued_behind_a_live_run(client: Client) -> None:
    live = client.create_run(
        "wait", tools=[], model=scripted({"content": "first", "delay_ms": 60_000})
    )
    with pytest.raises(AgentRunnerError) as busy:
        client.create_run("next", previous_run_id=live.id, model=scripted({"content": "x"}))
    assert busy.value.code == "run_live"
    queued = client.create_run(
        "next", previous_run_id=live.id, multitask="interrupt", model=scripted({"content": "x"})
    )
    assert queued.status == "queued"
    assert client.wait(live.id).status == "aborted"
    assert client.wait(queued.id).answer == "x"


@pytest.mark.anyio
async def test_the_async_client_has_the_same_schedules(server: Server) -> None:
    async with AsyncClient(server.url) as client:
        made = await client.create_schedule("0 0 1 1 *", QUICK, thread="continue")
        assert (await client.get_schedule(made.id)).thread == "continue"
        listed = [schedule.id async for schedule in client.list_schedules()]
        assert made.id in listed
        changed = await client.update_schedule(made.id, overlap="enqueue")
        assert changed.overlap == "enqueue"
        run = await client.trigger_schedule(made.id)
        assert run.schedule_id == made.id
        assert [r.id async for r in client.list_runs(schedule_id=made.id)] == [run.id]
        await client.wait(run.id)
        await client.delete_schedule(made.id)
