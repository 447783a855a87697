"""An incremental parser of ``text/event-stream`` (Server-Sent Events).

It follows the WHATWG HTML standard's rules for the format: lines end with
CRLF, LF or CR; a blank line dispatches the event being built; a line that
starts with ``:`` is a comment; ``field: value`` sets ``event``, ``data``
(several ``data`` lines join with LF), ``id`` or ``retry``; an event without
``data`` is not dispatched; an event cut off by the end of the stream is
discarded.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from typing import Optional

_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class ServerSentEvent:
    """One dispatched event.

    ``id`` is the event's own ``id:`` field, ``None`` when it had none;
    ``retry`` the reconnection time in milliseconds it carried, if any.
    """

    event: str
    data: str
    id: Optional[str] = None
    retry: Optional[int] = None


class SSEDecoder:
    """Turns the bytes of one event stream, chunk by chunk, into events.

    Chunks may split lines, and UTF-8 sequences, anywhere. ``retry`` is the
    last reconnection time (milliseconds) the stream asked for, if any.
    """

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._after_cr = False
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._id: Optional[str] = None
        self._event_retry: Optional[int] = None
        self.retry: Optional[int] = None

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events that ``chunk`` completes, in order."""
        text = self._text.decode(chunk)
        if not text:
            return []
        if not self._started:
            self._started = True
            if text.startswith("\ufeff"):
                text = text[1:]
        # A CR ends its line at once; an LF right after it is part of that end.
        if self._after_cr and text.startswith("\n"):
            text = text[1:]
        buffer = self._pending + text
        self._after_cr = buffer.endswith("\r")
        lines = _LINE_END.split(buffer)
        self._pending = lines.pop()
        events = []
        for line in lines:
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> Optional[ServerSentEvent]:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry = self._event_retry = int(value)
        return None

    def _dispatch(self) -> Optional[ServerSentEvent]:
        event = None
        if self._data:
            event = ServerSentEvent(
                event=self._event or "message",
                data="\n".join(self._data),
                id=self._id,
                retry=self._event_retry,
            )
        self._event = ""
        self._data = []
        self._id = None
        self._event_retry = None
        return event
