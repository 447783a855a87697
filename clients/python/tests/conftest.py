"""Fixtures: the real agent-runner server, started once per session, and clients of it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support import TOKEN, Server

from agent_runner import Client


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    """The server most tests share: no tokens, default limits."""
    server = Server()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def strict_server() -> Iterator[Server]:
    """A server with a token, one run at a time and no queue."""
    server = Server(
        "max_concurrent = 1\n"
        "max_queued = 0\n"
        "[[auth.tokens]]\n"
        'tenant = "python"\n'
        f'token = "{TOKEN}"\n'
    )
    yield server
    server.stop()


@pytest.fixture
def client(server: Server) -> Iterator[Client]:
    """A client of the shared server."""
    with Client(server.url) as client:
        yield client


@pytest.fixture
def anyio_backend() -> str:
    """The async tests run on asyncio."""
    return "asyncio"
