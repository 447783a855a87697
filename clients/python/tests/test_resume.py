"""An event stream cut in the middle of a run resumes where it stopped."""

from __future__ import annotations

import pytest
from support import CuttingProxy, Server, slow_steps

from agent_runner import AgentRunnerError, AsyncClient, Client, Event


def check_whole(events: list[Event], proxy: CuttingProxy) -> None:
    """Every event once, in order, to run_end; the stream was cut and resumed."""
    assert proxy.cuts_made == 1
    # Cut within the third event: the first two were whole, so it resumes after 2.
    assert proxy.resumed_from() == ["2"]
    assert [event.sequence for event in events] == list(range(1, len(events) + 1))
    assert events[-1].type == "run_end" and events[-1].data["status"] == "completed"
    assert sum(event.type == "model_start" for event in events) == 6


def test_events_resume_after_a_cut(server: Server) -> None:
    with CuttingProxy(server.url, cut_at=3) as proxy, Client(proxy.url) as client:
        run = client.create_run("Go slowly", model=slow_steps(6, 300), tools=["list_dir"])
        events = list(client.events(run.id))

    check_whole(events, proxy)


@pytest.mark.anyio
async def test_async_events_resume_after_a_cut(server: Server) -> None:
    with CuttingProxy(server.url, cut_at=3) as proxy:
        async with AsyncClient(proxy.url) as client:
            run = await client.create_run("Go slowly", model=slow_steps(6, 300), tools=["list_dir"])
            events = [event async for event in client.events(run.id)]

    check_whole(events, proxy)


def test_a_stream_that_keeps_dropping_gives_up(server: Server) -> None:
    proxy = CuttingProxy(server.url, cut_at=1, cuts=10)
    with proxy, Client(proxy.url, max_reconnects=1) as client:
        run = client.create_run("Go slowly", model=slow_steps(3, 300), tools=["list_dir"])
        with pytest.raises(AgentRunnerError) as gave_up:
            list(client.events(run.id))

    # Each connection was cut within the first event: no progress, so no
    # Last-Event-ID, and one reconnection only.
    assert proxy.cuts_made == 2 and proxy.resumed_from() == []
    assert gave_up.value.code == "stream_interrupted" and gave_up.value.status is None
    assert run.id in gave_up.value.message and "after=0" in gave_up.value.message
    with Client(server.url) as direct:
        assert direct.wait(run.id).status == "completed"
