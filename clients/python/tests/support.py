"""Helpers of the tests: the real server, scripted models, and a TCP proxy
that cuts event streams."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlsplit

import httpx
import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
STARTUP_TIMEOUT_S = 30.0

#: The token and tenant of the server that needs one.
TOKEN = "python-client-token"


class Server:
    """An ``agent-runner serve`` process on a free loopback port."""

    def __init__(self, extra_config: str = "") -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="agent-runner-python-")
        data = Path(self.dir.name)
        config = data / "server.toml"
        config.write_text(
            "[server]\n"
            'bind = "127.0.0.1:0"\n'
            "[storage]\n"
            f'database_url = "sqlite://{data}/db.sqlite"\n'
            f'workspaces_dir = "{data}/workspaces"\n'
            "[runs]\n"
            "shutdown_grace_ms = 1000\n" + extra_config
        )
        binary = os.environ.get("AGENT_RUNNER_BIN") or str(
            REPO_ROOT / "target" / "debug" / "agent-runner"
        )
        if not Path(binary).is_file():
            pytest.exit(f"no agent-runner binary at {binary}: build it, or set AGENT_RUNNER_BIN")
        self.log = data / "server.log"
        env = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith("AGENT_RUNNER_")
        }
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [binary, "serve", "--config", str(config)],
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
            )
        try:
            self.url = self._listening_url()
            self._check_ready()
        except BaseException:
            self.stop()
            raise

    def _listening_url(self) -> str:
        """The URL the server prints (``listening on http://...``) once it listens."""
        lines: queue.Queue[bytes] = queue.Queue()
        stdout = self.process.stdout
        assert stdout is not None

        def read() -> None:
            for line in stdout:
                lines.put(line)
            lines.put(b"")

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(
                    f"the server did not listen in time:\n{self.log_text()}"
                ) from None
            if not line:
                raise RuntimeError(f"the server exited:\n{self.log_text()}")
            text = line.decode().strip()
            if text.startswith("listening on "):
                return text[len("listening on ") :]

    def _check_ready(self) -> None:
        # The server prints its address once its storage is open and its
        # socket bound: it is ready then, with nothing to wait for.
        status = httpx.get(f"{self.url}/readyz", timeout=5.0).status_code
        if status != 200:
            raise RuntimeError(f"the server listens but is not ready ({status}):\n{self.log_text()}")

    def log_text(self) -> str:
        """What the server logged (stderr)."""
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and remove its data."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.dir.cleanup()


#: A run of one tool call (slow by ``delay_ms``), then the answer ``Done``.
LIST_THEN_DONE: list[dict[str, Any]] = [
    {
        "content": "",
        "tool_calls": [{"id": "1", "name": "list_dir", "arguments": {}}],
        "delay_ms": 300,
    },
    {"content": "Done", "usage": {"input_tokens": 12, "output_tokens": 3}},
]


def scripted(*responses: dict[str, Any]) -> dict[str, Any]:
    """An inline scripted model that gives ``responses`` in order."""
    return {"scripted": list(responses)}


def slow_steps(count: int, delay_ms: int) -> dict[str, Any]:
    """A model that lists the workspace ``count - 1`` times, each response
    ``delay_ms`` late, then answers ``Done``."""
    responses: list[dict[str, Any]] = [
        {
            "content": "",
            "tool_calls": [{"id": str(step), "name": "list_dir", "arguments": {}}],
            "delay_ms": delay_ms,
        }
        for step in range(1, count)
    ]
    responses.append({"content": "Done", "delay_ms": delay_ms})
    return scripted(*responses)


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


_ID_LINE = re.compile(rb"\nid: [0-9]+\n")


class CuttingProxy:
    """A TCP proxy to a server that cuts event streams.

    It forwards every connection both ways, byte for byte. On each of the
    first ``cuts`` connections that carry a ``GET .../events`` request, once
    it has forwarded the ``cut_at``-th ``id:`` line of the answer, it closes
    both sockets, in the middle of that event. What each connection sent to
    the server is kept in ``requests``, a bytearray per connection.
    """

    def __init__(self, server_url: str, cut_at: int = 3, cuts: int = 1) -> None:
        target = urlsplit(server_url)
        self._target = (target.hostname or "127.0.0.1", target.port or 80)
        self._cut_at = cut_at
        self._lock = threading.Lock()
        self._cuts_left = cuts
        self.cuts_made = 0
        self.requests: list[bytearray] = []
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen()
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        """Stop taking connections."""
        self._listener.close()

    def __enter__(self) -> CuttingProxy:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def resumed_from(self) -> list[str]:
        """The ``Last-Event-ID`` values of the requests it forwarded, in order."""
        with self._lock:
            sent = [bytes(requests) for requests in self.requests]
        return [
            value.decode()
            for requests in sent
            for value in re.findall(rb"(?im)^last-event-id: *([^\r\n]*)\r?$", requests)
        ]

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._target)
            _Connection(self, downstream, upstream).start()

    def _record(self, sent: bytearray, data: bytes) -> None:
        with self._lock:
            if not sent:
                self.requests.append(sent)
            sent.extend(data)

    def _claim_cut(self) -> bool:
        """Whether this event stream is one to cut (there are cuts left)."""
        with self._lock:
            if self._cuts_left == 0:
                return False
            self._cuts_left -= 1
            self.cuts_made += 1
            return True


class _Connection:
    """One proxied connection: a thread each way."""

    def __init__(self, proxy: CuttingProxy, downstream: socket.socket, upstream: socket.socket):
        self._proxy = proxy
        self._downstream = downstream
        self._upstream = upstream
        self._streaming = threading.Event()
        self._sent = bytearray()
        self._answer = b""
        self._closed = False
        self._lock = threading.Lock()

    def start(self) -> None:
        threading.Thread(target=self._requests, daemon=True).start()
        threading.Thread(target=self._answers, daemon=True).start()

    def _requests(self) -> None:
        while True:
            data = self._receive(self._downstream)
            if not data:
                break
            if re.match(rb"GET /v1/runs/[^ ]+/events[ ?]", data):
                self._streaming.set()
            self._proxy._record(self._sent, data)
            if not self._send(self._upstream, data):
                break
        self._close()

    def _answers(self) -> None:
        cut_here: Optional[bool] = None
        while True:
            data = self._receive(self._upstream)
            if not data:
                break
            if self._streaming.is_set() and cut_here is None:
                cut_here = self._proxy._claim_cut()
            if cut_here:
                self._answer += data
                end = self._cut_point(len(data))
                if end is not None:
                    self._send(self._downstream, data[:end])
                    break
            if not self._send(self._downstream, data):
                break
        self._close()

    def _cut_point(self, chunk_length: int) -> Optional[int]:
        """Where in the last chunk the ``cut_at``-th id line ends, if it has."""
        lines = list(_ID_LINE.finditer(self._answer))
        if len(lines) < self._proxy._cut_at:
            return None
        line_end = lines[self._proxy._cut_at - 1].end()
        return line_end - (len(self._answer) - chunk_length)

    @staticmethod
    def _receive(sock: socket.socket) -> bytes:
        try:
            return sock.recv(65536)
        except OSError:
            return b""

    @staticmethod
    def _send(sock: socket.socket, data: bytes) -> bool:
        try:
            sock.sendall(data)
            return True
        except OSError:
            return False

    def _close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for sock in (self._downstream, self._upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
