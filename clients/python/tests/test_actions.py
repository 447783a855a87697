"""Runs that pause for a decision, answered with the sync client."""

from __future__ import annotations

from typing import Any

from support import scripted

from agent_runner import Client, PendingAction, Run

LOOKUP_ORDER: dict[str, Any] = {
    "name": "lookup_order",
    "description": "Find an order",
    "parameters": {
        "type": "object",
        "properties": {"order_id": {"type": "string"}},
        "required": ["order_id"],
        "additionalProperties": False,
    },
}


def lookup(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "name": "lookup_order", "arguments": {"order_id": "42"}}


def write_status(call_id: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "name": "write_file",
        "arguments": {"path": "status.txt", "content": "shipped"},
    }


def test_pause_answer_output_then_approve(client: Client) -> None:
    run = client.create_run(
        "Note the order status",
        tools=["write_file"],
        approval=["write_file"],
        client_tools=[LOOKUP_ORDER],
        model=scripted(
            {"content": "", "tool_calls": [lookup("1")]},
            {"content": "", "tool_calls": [write_status("2")]},
            {"content": "Noted."},
        ),
    )
    assert run.approval == {"tools": ["write_file"]}
    assert [tool["name"] for tool in run.client_tools] == ["lookup_order"]

    pauses: list[list[PendingAction]] = []
    events = []
    for event in client.events(run.id):
        events.append(event)
        if event.type != "actions_required":
            continue
        pauses.append(event.actions)
        paused = client.get_run(run.id)
        assert paused.status == "requires_action" and paused.is_paused
        assert paused.pending_actions == event.actions
        action = event.actions[0]
        if action.kind == "client_tool":
            answered = client.submit_output(run.id, action.call_id, {"status": "shipped"})
        else:
            answered = client.approve(run.id, action.call_id)
        assert answered.status == "queued" and answered.pending_actions == []

    assert pauses == [
        [PendingAction("1", "client_tool", "lookup_order", {"order_id": "42"})],
        [
            PendingAction(
                "2", "approval", "write_file", {"path": "status.txt", "content": "shipped"}
            )
        ],
    ]
    assert [event.sequence for event in events] == list(range(1, len(events) + 1))
    assert events[-1].data["status"] == "completed"
    ended = client.get_run(run.id)
    assert (ended.status, ended.answer, ended.tool_calls) == ("completed", "Noted.", 2)
    results = [m for m in client.messages(run.id) if m["role"] == "tool"]
    assert [(m["call_id"], m["is_error"]) for m in results] == [("1", False), ("2", False)]
    assert "shipped" in results[0]["content"]


def paused_on_a_lookup_and_a_write(client: Client) -> Run:
    """A run paused on one batch: a client tool's call and a write to approve."""
    run = client.create_run(
        "Note the order status",
        tools=["write_file"],
        approval=["write_file"],
        client_tools=[LOOKUP_ORDER],
        model=scripted(
            {"content": "", "tool_calls": [lookup("1"), write_status("2")]},
            {"content": "Could not."},
        ),
    )
    for event in client.events(run.id):
        if event.type == "actions_required":
            break
    return run


def test_deny_and_fail_in_one_answer(client: Client) -> None:
    run = paused_on_a_lookup_and_a_write(client)
    paused = client.get_run(run.id)
    assert {action.call_id for action in paused.pending_actions} == {"1", "2"}

    client.answer_actions(
        run.id,
        [
            {"call_id": "2", "decision": "deny", "reason": "not now"},
            {"call_id": "1", "error": "the order service is down"},
        ],
    )
    ended = client.wait(run.id)

    assert (ended.status, ended.answer) == ("completed", "Could not.")
    results = {m["call_id"]: m for m in client.messages(run.id) if m["role"] == "tool"}
    assert results["1"]["is_error"] and "the order service is down" in results["1"]["content"]
    assert results["2"]["is_error"] and "Denied: not now" in results["2"]["content"]


def test_deny_and_submit_error_one_at_a_time(client: Client) -> None:
    run = paused_on_a_lookup_and_a_write(client)

    half = client.deny(run.id, "2")
    assert half.status == "requires_action"
    assert [action.call_id for action in half.pending_actions] == ["1"]
    assert client.submit_error(run.id, "1", "no such order").status == "queued"

    assert client.wait(run.id).status == "completed"
    results = {m["call_id"]: m["content"] for m in client.messages(run.id) if m["role"] == "tool"}
    assert "no such order" in results["1"] and "Denied" in results["2"]


def test_an_approval_with_other_arguments_runs_them(client: Client) -> None:
    run = client.create_run(
        "Note the order status",
        tools=["write_file"],
        approval=["write_file"],
        model=scripted({"content": "", "tool_calls": [write_status("w")]}, {"content": "Noted."}),
    )
    edited = {"path": "status.txt", "content": "delayed"}
    for event in client.events(run.id):
        if event.type == "actions_required":
            assert client.approve(run.id, "w", arguments=edited).status == "queued"
    done = client.wait(run.id)
    assert done.status == "completed"
    assert "+delayed" in client.diff(run.id)
    result = [m for m in client.messages(run.id) if m["role"] == "tool"][0]
    assert result["edited"] is True and result["arguments"] == edited
