"""Reading durations written as "1h30m", "45s" or "2d 4h"."""

import re

# Seconds in each unit, largest first.
UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}

_PART = re.compile(r"(\d+)([dhms])")


def parse_duration(text):
    """The number of seconds in `text`, a duration such as "1h30m" or "90s".

    A duration is one or more parts, each a whole number followed by a unit
    (d, h, m or s); spaces between parts are allowed. Raises ValueError for
    text that is not a duration.
    """
    text = text.strip().lower()
    if not text:
        raise ValueError("empty duration")
    total = 0
    position = 0
    for match in _PART.finditer(text):
        if text[position:match.start()].strip():
            raise ValueError(f"not a duration: {text!r}")
        number, unit = match.groups()
        total = int(number) * UNITS[unit]
        position = match.end()
    if position == 0 or text[position:].strip():
        raise ValueError(f"not a duration: {text!r}")
    return total
