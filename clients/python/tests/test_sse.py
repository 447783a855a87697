"""The event-stream parser and the resume bookkeeping, on bytes as a server sends them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_runner import AgentRunnerError
from agent_runner._events import EventStream
from agent_runner._sse import ServerSentEvent, SSEDecoder

RUN = "01a22985-2898-7256-bd76-a3a04a90e80a"


def frame(sequence: int, kind: str, **fields: Any) -> bytes:
    data = {"run_id": RUN, "sequence": sequence, "timestamp": "t", "type": kind, **fields}
    return f"id: {sequence}\nevent: {kind}\ndata: {json.dumps(data)}\n\n".encode()


def delta(text: str) -> bytes:
    data = {"run_id": RUN, "timestamp": "t", "type": "model_delta", "text": text}
    return f"event: model_delta\ndata: {json.dumps(data)}\n\n".encode()


def test_fields_comments_and_multi_line_data() -> None:
    stream = (
        b": keep-alive\n"
        b"retry: 1500\n"
        b"id: 7\n"
        b"event: note\n"
        b"data: first\n"
        b"data:second\n"
        b"data\n"
        b"unknown: ignored\n"
        b"\n"
        b"data: plain\n\n"
        b"event: no-data\n\n"
        b"id: 9\n"
        b"data: cut off by the end"
    )
    decoder = SSEDecoder()

    events = decoder.feed(stream)

    assert events == [
        ServerSentEvent(event="note", data="first\nsecond\n", id="7", retry=1500),
        ServerSentEvent(event="message", data="plain"),
    ]
    assert decoder.retry == 1500


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_any_line_end_and_any_split(newline: bytes) -> None:
    stream = "\ufeffid: 1\nevent: é\ndata: ünïcode\n\nid: 2\ndata: x\n\n".encode()
    stream = stream.replace(b"\n", newline)
    whole = SSEDecoder().feed(stream)
    assert [event.id for event in whole] == ["1", "2"]
    assert whole[0].event == "é" and whole[0].data == "ünïcode"

    decoder = SSEDecoder()
    byte_by_byte = [event for i in range(len(stream)) for event in decoder.feed(stream[i : i + 1])]
    assert byte_by_byte == whole


def test_deltas_come_through_without_moving_the_position() -> None:
    stream = EventStream(RUN, None, max_reconnects=3)
    stream.opened("text/event-stream")

    events = stream.feed(frame(1, "run_start") + delta("Hel") + delta("lo") + frame(2, "model_end"))

    assert [(event.sequence, event.type) for event in events] == [
        (1, "run_start"),
        (None, "model_delta"),
        (None, "model_delta"),
        (2, "model_end"),
    ]
    assert events[1].data["text"] == "Hel" and events[1].run_id == RUN
    assert stream.last_sequence == 2
    assert stream.request_headers()["last-event-id"] == "2"


def test_a_resumed_stream_drops_the_partial_event_and_repeats() -> None:
    stream = EventStream(RUN, None, max_reconnects=3)
    stream.opened("text/event-stream")
    first = stream.feed(frame(1, "run_start") + frame(2, "message")[:10])
    assert stream.dropped("cut") == 1.0

    stream.opened("text/event-stream")
    rest = stream.feed(
        frame(1, "run_start") + frame(2, "message") + frame(3, "run_end") + frame(4, "late")
    )

    assert [event.sequence for event in first + rest] == [1, 2, 3]
    assert stream.ended


def test_drops_without_progress_are_capped() -> None:
    stream = EventStream(RUN, 5, max_reconnects=2)
    stream.opened("text/event-stream")
    stream.feed(b"retry: 200\n\n")

    assert stream.dropped("one") == pytest.approx(0.2)
    assert stream.dropped("two") == pytest.approx(0.4)
    with pytest.raises(AgentRunnerError) as gave_up:
        stream.dropped("three")
    assert gave_up.value.code == "stream_interrupted"
    assert "after=5" in gave_up.value.message and "three" in gave_up.value.message


def test_a_stream_that_is_not_an_event_stream() -> None:
    stream = EventStream(RUN, None, max_reconnects=1)
    with pytest.raises(AgentRunnerError) as refused:
        stream.opened("text/html")
    assert refused.value.code == "invalid_response"
