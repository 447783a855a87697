"""Runs that delegate to sub-agents, through the sync client."""

from __future__ import annotations

import time

from support import scripted

from agent_runner import Client


def test_a_childs_pause_is_answered_through_its_parent(client: Client) -> None:
    asker = {
        "description": "writes, once allowed",
        "tools": ["write_file"],
        "approval": {"tools": ["write_file"]},
        "model": scripted(
            {
                "content": "",
                "tool_calls": [
                    {"id": "w", "name": "write_file", "arguments": {"path": "a.txt", "content": "x"}}
                ],
            },
            {"content": "written", "usage": {"input_tokens": 4, "output_tokens": 1}},
        ),
    }
    run = client.create_run(
        "delegate the writing",
        subagents={"asker": asker},
        model=scripted(
            {
                "content": "",
                "tool_calls": [
                    {"id": "d", "name": "delegate", "arguments": {"agent": "asker", "prompt": "write a.txt"}}
                ],
            },
            {"content": "done", "usage": {"input_tokens": 2, "output_tokens": 1}},
        ),
    )
    assert run.subagents == {
        "asker": {"description": "writes, once allowed", "workspace": "shared", "agent": None}
    }
    # The child's pause shows on its parent, naming the child.
    deadline = time.monotonic() + 30
    while True:
        waiting = client.get_run(run.id)
        if waiting.status == "requires_action":
            break
        assert time.monotonic() < deadline, "the parent never showed its child's pause"
        time.sleep(0.05)
    [action] = waiting.pending_actions
    [child] = client.list_runs(parent_run_id=run.id)
    assert (action.call_id, action.name, action.run_id) == ("w", "write_file", child.id)
    assert child.root_run_id == run.id

    client.answer_actions(run.id, [{"call_id": "w", "run_id": child.id, "decision": "approve"}])
    done = client.wait(run.id)
    assert done.status == "completed" and done.answer == "done"
    assert done.usage.input_tokens == 2
    assert done.usage_total is not None and done.usage_total.input_tokens == 6
