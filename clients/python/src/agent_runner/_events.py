"""Where a run's event stream stands, across the connections that carry it.

The sync and async clients share this bookkeeping: they open a connection,
feed it the bytes, yield what it returns, and on a drop ask it how long to
wait before they reconnect with the headers it gives.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from ._errors import INVALID_RESPONSE, STREAM_INTERRUPTED, AgentRunnerError
from ._sse import SSEDecoder
from ._types import Event

#: Milliseconds to wait before reconnecting when the server named no ``retry``.
DEFAULT_RETRY_MS = 1000


class EventStream:
    """The resume position and reconnection budget of one run's event stream.

    ``last_sequence`` is the last stored event seen (``model_delta`` events,
    which have no sequence, do not move it); a reconnection resumes after it
    with ``Last-Event-ID``. Each drop without progress since the previous
    one costs an attempt; past ``max_reconnects`` the stream gives up.
    """

    def __init__(self, run_id: str, after: Optional[int], max_reconnects: int) -> None:
        self.run_id = run_id
        self.last_sequence = after
        self.max_reconnects = max_reconnects
        self.ended = False
        self.connected = False
        self._failures = 0
        self._retry_ms = DEFAULT_RETRY_MS
        self._decoder = SSEDecoder()

    def request_headers(self) -> dict[str, str]:
        """Headers of the next connection: from the start, or resuming."""
        headers = {"accept": "text/event-stream", "cache-control": "no-cache"}
        if self.last_sequence is not None:
            headers["last-event-id"] = str(self.last_sequence)
        return headers

    def opened(self, content_type: str) -> None:
        """A connection answered 200: parse it afresh (a partial event of the
        previous connection is dropped; the server sends it again)."""
        if "text/event-stream" not in content_type:
            raise AgentRunnerError(
                INVALID_RESPONSE,
                f"the events of run {self.run_id} came as {content_type or 'no content type'}, "
                "not text/event-stream",
            )
        self.connected = True
        self._decoder = SSEDecoder()

    def feed(self, chunk: bytes) -> list[Event]:
        """The new events ``chunk`` completes, up to and with ``run_end``."""
        events: list[Event] = []
        for sse in self._decoder.feed(chunk):
            sequence = _sequence(sse.id)
            if sequence is not None:
                if self.last_sequence is not None and sequence <= self.last_sequence:
                    continue
                self.last_sequence = sequence
                self._failures = 0
            event = Event.from_dict(self._decode(sse.data), sse.event)
            events.append(event)
            if event.is_end:
                self.ended = True
                break
        if self._decoder.retry is not None:
            self._retry_ms = self._decoder.retry
        return events

    def dropped(self, cause: str) -> float:
        """The connection ended before ``run_end`` (``cause`` says how): the
        seconds to wait before reconnecting, or ``AgentRunnerError``
        (``stream_interrupted``) once the attempts are spent.

        The wait is the server's ``retry`` times the number of drops in a
        row without an event in between.
        """
        self._failures += 1
        if self._failures > self.max_reconnects:
            position = self.last_sequence if self.last_sequence is not None else 0
            raise AgentRunnerError(
                STREAM_INTERRUPTED,
                f"the event stream of run {self.run_id} dropped {self._failures} times "
                f"without progress (last: {cause}); resume it with events(run_id, "
                f"after={position})",
            )
        return self._retry_ms / 1000 * self._failures

    def _decode(self, data: str) -> dict[str, Any]:
        try:
            value = json.loads(data)
        except ValueError as error:
            raise AgentRunnerError(
                INVALID_RESPONSE, f"an event of run {self.run_id} is not JSON: {error}"
            ) from error
        if not isinstance(value, dict):
            raise AgentRunnerError(
                INVALID_RESPONSE, f"an event of run {self.run_id} is not a JSON object"
            )
        return value


def _sequence(event_id: Optional[str]) -> Optional[int]:
    if event_id is None or not (event_id.isascii() and event_id.isdigit()):
        return None
    return int(event_id)
