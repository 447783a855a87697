"""Stored agents as A2A servers, driven by the official A2A client
(``a2a-sdk``, protocol 1.0) against the real server: send, stream to the
end, get, cancel, a task waiting for input answered through A2A, and
another tenant's agent refused."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator

import httpx
import pytest
from support import Server, scripted

if sys.version_info < (3, 10):
    # The SDK needs 3.10; requirements-test.txt installs it from there on,
    # where a missing SDK is a failure, not a skip.
    pytest.skip("a2a-sdk needs Python 3.10", allow_module_level=True)

import a2a.client as a2a_client  # noqa: E402
import a2a.types.a2a_pb2 as a2a_types  # noqa: E402
import a2a.utils.errors as a2a_errors  # noqa: E402
from google.protobuf import json_format, struct_pb2  # noqa: E402

ONE = "a2a-tenant-one-token"
TWO = "a2a-tenant-two-token"


@pytest.fixture(scope="module")
def a2a_server() -> Iterator[Server]:
    """A server with two tenants, each with its own token."""
    server = Server(
        "[[auth.tokens]]\n"
        'tenant = "one"\n'
        f'token = "{ONE}"\n'
        "[[auth.tokens]]\n"
        'tenant = "two"\n'
        f'token = "{TWO}"\n'
    )
    agents = {
        "greeter": {
            "description": "Greets whoever asks",
            "model": scripted({"content": "hello there"}),
        },
        "sleeper": {"model": scripted({"delay_ms": 60000, "content": "late"})},
        "writer": {
            "description": "Writes a file, once allowed",
            "tools": ["write_file"],
            "approval": {"tools": ["write_file"]},
            "model": scripted(
                {
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "w",
                            "name": "write_file",
                            "arguments": {"path": "a.txt", "content": "hi"},
                        }
                    ],
                },
                {"content": "written"},
            ),
        },
    }
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {ONE}"}) as http:
        for name, definition in agents.items():
            response = http.post("/v1/agents", json={"name": name, **definition})
            assert response.status_code == 201, response.text
    yield server
    server.stop()


def user(text: str = "", task_id: str = "", context_id: str = "", data=None):
    parts = [a2a_types.Part(text=text)] if text else []
    if data is not None:
        parts.append(a2a_types.Part(data=json_format.ParseDict(data, struct_pb2.Value())))
    return a2a_types.Message(
        message_id=str(uuid.uuid4()),
        role=a2a_types.Role.ROLE_USER,
        parts=parts,
        task_id=task_id,
        context_id=context_id,
    )


def state(task) -> str:
    return a2a_types.TaskState.Name(task.status.state)


async def connect(server: Server, agent: str, token: str = ONE, streaming: bool = False):
    """A client of `agent`, from its card, with the tenant's token."""
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    card = await a2a_client.A2ACardResolver(http, f"{server.url}/a2a/{agent}").get_agent_card()
    config = a2a_client.ClientConfig(httpx_client=http, streaming=streaming)
    return card, a2a_client.ClientFactory(config).create(card), http


async def send(client, message, **configuration):
    request = a2a_types.SendMessageRequest(
        message=message,
        configuration=a2a_types.SendMessageConfiguration(**configuration),
    )
    return [response async for response in client.send_message(request)]


@pytest.mark.anyio
async def test_send_stream_get_and_cancel(a2a_server: Server) -> None:
    card, client, http = await connect(a2a_server, "greeter")
    assert card.name == "greeter"
    assert card.description == "Greets whoever asks"
    assert card.capabilities.streaming
    assert card.supported_interfaces[0].url == f"{a2a_server.url}/a2a/greeter"
    assert card.supported_interfaces[0].protocol_version == "1.0"
    assert "bearer" in card.security_schemes

    # Sent: answered once the task ends, its answer an artifact.
    [reply] = await send(client, user("Say hello."))
    task = reply.task
    assert state(task) == "TASK_STATE_COMPLETED"
    assert task.artifacts[0].parts[0].text == "hello there"
    run = httpx.get(
        f"{a2a_server.url}/v1/runs/{task.id}", headers={"Authorization": f"Bearer {ONE}"}
    ).json()
    assert run["agent"]["name"] == "greeter" and run["prompt"] == "Say hello."

    # Got again, with its history.
    got = await client.get_task(a2a_types.GetTaskRequest(id=task.id, history_length=10))
    assert state(got) == "TASK_STATE_COMPLETED"
    assert [m.parts[0].text for m in got.history] == ["Say hello.", "hello there"]

    # Streamed to the end: the snapshot first, the final state last.
    _, streaming, stream_http = await connect(a2a_server, "greeter", streaming=True)
    events = await send(streaming, user("Again.", context_id=task.context_id))
    kinds = [event.WhichOneof("payload") for event in events]
    assert kinds[0] == "task" and kinds[-1] == "status_update", kinds
    assert "artifact_update" in kinds
    last = events[-1].status_update
    assert a2a_types.TaskState.Name(last.status.state) == "TASK_STATE_COMPLETED"
    # The same context: a follow-up of its latest run.
    follow_up = events[0].task
    assert follow_up.context_id == task.context_id and follow_up.id != task.id
    run = httpx.get(
        f"{a2a_server.url}/v1/runs/{follow_up.id}", headers={"Authorization": f"Bearer {ONE}"}
    ).json()
    assert run["previous_run_id"] == task.id

    # A task that ended cannot be cancelled; one that is unknown is not found.
    with pytest.raises(a2a_errors.TaskNotCancelableError):
        await client.cancel_task(a2a_types.CancelTaskRequest(id=task.id))
    with pytest.raises(a2a_errors.TaskNotFoundError):
        await client.get_task(a2a_types.GetTaskRequest(id=str(uuid.uuid4())))
    await client.close()
    await streaming.close()
    await http.aclose()
    await stream_http.aclose()

    # A long task, started without waiting, then cancelled.
    _, sleeper, http = await connect(a2a_server, "sleeper")
    [reply] = await send(sleeper, user("Take your time."), return_immediately=True)
    assert state(reply.task) in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    cancelled = await sleeper.cancel_task(a2a_types.CancelTaskRequest(id=reply.task.id))
    assert state(cancelled) == "TASK_STATE_CANCELED"
    await sleeper.close()
    await http.aclose()


@pytest.mark.anyio
async def test_a_task_waiting_for_input_is_answered_through_a2a(a2a_server: Server) -> None:
    _, client, http = await connect(a2a_server, "writer")
    [reply] = await send(client, user("Write a.txt."))
    task = reply.task
    assert state(task) == "TASK_STATE_INPUT_REQUIRED"
    parts = task.status.message.parts
    actions = json_format.MessageToDict(parts[1].data)["actions"]
    assert actions == [
        {
            "call_id": "w",
            "kind": "approval",
            "name": "write_file",
            "arguments": {"path": "a.txt", "content": "hi"},
        }
    ]
    # A message without the answers is refused; nothing is answered.
    with pytest.raises(a2a_errors.InvalidParamsError):
        await send(client, user("yes", task_id=task.id, context_id=task.context_id))
    # The answer, as a data part: the task goes on to its end.
    answer = {"actions": [{"call_id": "w", "decision": "approve"}]}
    [reply] = await send(client, user(task_id=task.id, context_id=task.context_id, data=answer))
    assert reply.task.id == task.id
    assert state(reply.task) == "TASK_STATE_COMPLETED"
    assert reply.task.artifacts[0].parts[0].text == "written"
    file = httpx.get(
        f"{a2a_server.url}/v1/runs/{task.id}/workspace/a.txt",
        headers={"Authorization": f"Bearer {ONE}"},
    )
    assert file.text == "hi"
    # An ended task takes no more messages.
    with pytest.raises(a2a_errors.UnsupportedOperationError):
        await send(client, user("more", task_id=task.id, context_id=task.context_id))
    await client.close()
    await http.aclose()


@pytest.mark.anyio
async def test_another_tenants_agent_is_refused(a2a_server: Server) -> None:
    with pytest.raises(a2a_client.errors.AgentCardResolutionError) as refused:
        await connect(a2a_server, "greeter", token=TWO)
    assert refused.value.status_code == 404
    # Its endpoint too, and without a token nothing at all.
    request = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}
    two = httpx.post(
        f"{a2a_server.url}/a2a/greeter", json=request, headers={"Authorization": f"Bearer {TWO}"}
    )
    assert two.status_code == 404, two.text
    assert two.json()["error"]["code"] == "agent_not_found"
    assert httpx.post(f"{a2a_server.url}/a2a/greeter", json=request).status_code == 401
