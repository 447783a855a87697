"""Agents and structured output with the sync client: an agent created,
read, updated, listed and archived; runs that name one; runs whose answer
must be JSON valid under a schema."""

from __future__ import annotations

from typing import Any, Callable

import pytest
from support import scripted

from agent_runner import Agent, AgentPage, AgentRunnerError, AgentVersionPage, Client

#: The schema of a sorted ticket: ``{"kind": "bug" | "question"}``.
TICKET: dict[str, Any] = {
    "type": "object",
    "properties": {"kind": {"enum": ["bug", "question"]}},
    "required": ["kind"],
    "additionalProperties": False,
}


def answering(answer: str) -> dict[str, Any]:
    """A definition whose scripted model answers ``answer``."""
    return {"instructions": "Answer briefly.", "model": scripted({"content": answer})}


def refused(call: Callable[[], object], status: int, code: str) -> AgentRunnerError:
    """The error ``call`` raises, which must have ``status`` and ``code``."""
    with pytest.raises(AgentRunnerError) as error:
        call()
    assert (error.value.status, error.value.code) == (status, code), error.value.message
    return error.value


def test_an_agent_is_created_read_updated_versioned_and_archived(client: Client) -> None:
    definition: dict[str, Any] = {
        "instructions": "Sort the ticket.",
        "tools": ["list_dir"],
        "limits": {"max_steps": 4},
    }
    created = client.create_agent("triage", description="Sorts tickets", **definition)

    assert isinstance(created, Agent)
    assert (created.name, created.version, created.archived) == ("triage", 1, False)
    assert created.description == "Sorts tickets"
    assert created.definition == definition
    assert created.created_at
    assert client.get_agent("triage") == created

    updated = client.update_agent("triage", **{**definition, "instructions": "Sort it well."})
    assert updated.version == 2 and updated.description is None
    assert updated.definition["instructions"] == "Sort it well."
    assert client.get_agent("triage") == updated
    assert client.get_agent("triage", version=1) == created
    assert client.update_agent("triage", **definition).version == 3

    versions = list(client.list_agent_versions("triage", limit=2))
    assert [agent.version for agent in versions] == [3, 2, 1]
    assert versions[2] == created
    page = client.list_agent_versions_page("triage", limit=2)
    assert isinstance(page, AgentVersionPage)
    assert [agent.version for agent in page.versions] == [3, 2]
    assert page.next_cursor is not None
    rest = client.list_agent_versions_page("triage", limit=2, cursor=page.next_cursor)
    assert [agent.version for agent in rest.versions] == [1]
    assert rest.next_cursor is None

    assert client.delete_agent("triage") is None
    archived = client.get_agent("triage")
    assert (archived.version, archived.archived) == (3, True)
    assert client.get_agent("triage", version=1).archived
    client.delete_agent("triage")  # archiving again is no error
    refused(lambda: client.update_agent("triage", **definition), 404, "agent_not_found")
    refused(lambda: client.create_run("hi", agent="triage"), 404, "agent_not_found")
    refused(lambda: client.create_run("hi", agent="triage@1"), 404, "agent_not_found")

    # Its name brings it back, as its next version.
    back = client.create_agent("triage", **definition)
    assert (back.version, back.archived) == (4, False)
    assert not client.get_agent("triage", version=1).archived


def test_agents_are_listed_by_name_live_or_archived(client: Client) -> None:
    for name in ("list-c", "list-a", "list-b"):
        client.create_agent(name, **answering(name))
    client.update_agent("list-b", **answering("list-b again"))
    client.delete_agent("list-c")

    live = [agent for agent in client.list_agents(limit=1) if agent.name.startswith("list-")]
    assert [(agent.name, agent.version, agent.archived) for agent in live] == [
        ("list-a", 1, False),
        ("list-b", 2, False),
    ]
    names = [agent.name for agent in client.list_agents()]
    assert names == sorted(names)
    archived = [agent.name for agent in client.list_agents(archived=True)]
    assert "list-c" in archived and "list-a" not in archived
    assert "list-c" in [agent.name for agent in client.list_agents(archived=True, limit=1)]

    page = client.list_agents_page(limit=1)
    assert isinstance(page, AgentPage) and len(page.agents) == 1
    assert page.next_cursor is not None
    following = client.list_agents_page(limit=1, cursor=page.next_cursor)
    assert following.agents[0].name > page.agents[0].name


def test_a_name_in_use_and_an_unknown_agent(client: Client) -> None:
    client.create_agent("taken", **answering("x"))
    refused(lambda: client.create_agent("taken", **answering("y")), 409, "agent_exists")
    assert client.get_agent("taken").version == 1

    refused(lambda: client.get_agent("nobody"), 404, "agent_not_found")
    refused(lambda: client.get_agent("taken", version=2), 404, "agent_not_found")
    refused(lambda: client.update_agent("nobody", **answering("x")), 404, "agent_not_found")
    refused(lambda: client.delete_agent("nobody"), 404, "agent_not_found")
    refused(lambda: client.list_agent_versions_page("nobody"), 404, "agent_not_found")
    refused(lambda: client.create_run("hi", agent="nobody"), 404, "agent_not_found")
    refused(lambda: client.create_run("hi", agent="taken@2"), 404, "agent_not_found")


def test_a_definition_is_validated_as_a_run(client: Client) -> None:
    error = refused(lambda: client.create_agent("bad", prompt="hi"), 422, "invalid_request")
    assert "prompt" in error.message
    refused(lambda: client.create_agent("bad", tools=["teleport"]), 422, "invalid_request")
    refused(lambda: client.create_agent("Not A Name"), 422, "invalid_request")
    refused(lambda: client.create_agent("bad", output_schema={"type": 5}), 422, "invalid_request")
    refused(lambda: client.get_agent("bad"), 404, "agent_not_found")


def test_a_run_names_an_agent_and_a_version(client: Client) -> None:
    limits = {"max_steps": 3, "max_tool_calls": 7}
    client.create_agent("greeter", limits=limits, **answering("Hello from version 1"))
    client.update_agent("greeter", limits=limits, **answering("Hello from version 2"))

    latest = client.create_run("Say hello", agent="greeter", wait=True)
    assert (latest.status, latest.answer) == ("completed", "Hello from version 2")
    assert latest.agent == {"name": "greeter", "version": 2}
    assert latest.prompt == "Say hello" and latest.instructions == "Answer briefly."
    assert latest.limits["max_tool_calls"] == 7

    first = client.create_run("Say hello", agent="greeter@1", wait=True)
    assert first.answer == "Hello from version 1"
    assert first.agent == {"name": "greeter", "version": 1}

    # The request's fields replace the definition's; limits key by key.
    own = client.create_run(
        "Say hello",
        agent="greeter@1",
        model=scripted({"content": "My own hello"}),
        limits={"max_steps": 2},
        wait=True,
    )
    assert own.answer == "My own hello" and own.agent == {"name": "greeter", "version": 1}
    assert (own.limits["max_steps"], own.limits["max_tool_calls"]) == (2, 7)

    runs = list(client.list_runs(agent="greeter", limit=2))
    assert [run.id for run in runs] == [own.id, first.id, latest.id]
    assert [run.id for run in client.list_runs_page(agent="greeter", limit=1).runs] == [own.id]

    plain = client.create_run("hi", model=scripted({"content": "plain"}), wait=True)
    assert (plain.agent, plain.output_schema, plain.output) == (None, None, None)


def test_a_run_with_an_output_schema_has_its_output(client: Client) -> None:
    run = client.create_run(
        "Sort: the app crashes",
        output_schema=TICKET,
        model=scripted({"content": '{"kind": "bug"}'}),
        wait=True,
    )

    assert run.status == "completed"
    assert run.output == {"kind": "bug"}
    assert run.answer == '{"kind": "bug"}'
    assert run.output_schema == TICKET
    assert run.limits["output_retries"] == 2
    end = list(client.events(run.id))[-1]
    assert end.is_end and end.output == {"kind": "bug"}


def test_an_invalid_answer_is_sent_back_then_fails_the_run(client: Client) -> None:
    retried = client.create_run(
        "Sort: how do I log in?",
        output_schema=TICKET,
        model=scripted(
            {"content": "It is a question."},
            {"content": '```json\n{"kind": "question"}\n```'},
        ),
        wait=True,
    )
    assert (retried.status, retried.steps) == ("completed", 2)
    assert retried.output == {"kind": "question"}

    failed = client.create_run(
        "Sort: the app crashes",
        output_schema=TICKET,
        limits={"output_retries": 1},
        model=scripted({"content": '{"kind": "crash"}'}, {"content": "A bug."}),
        wait=True,
    )
    assert failed.status == "failed"
    assert failed.error is not None and failed.error.startswith("output_invalid")
    assert failed.answer == "A bug." and failed.output is None
    assert failed.limits["output_retries"] == 1


def test_an_agents_output_schema_holds_for_its_runs(client: Client) -> None:
    client.create_agent(
        "sorter", output_schema=TICKET, model=scripted({"content": '{"kind": "question"}'})
    )

    run = client.create_run("Sort: where is the manual?", agent="sorter", wait=True)

    assert run.status == "completed"
    assert run.agent == {"name": "sorter", "version": 1}
    assert run.output_schema == TICKET
    assert run.output == {"kind": "question"}
