"""Writing a number of seconds as a duration."""

from .parser import UNITS


def format_duration(seconds):
    """`seconds` written as parse_duration reads it: 5400 -> "1h30m", 0 -> "0s"."""
    if seconds < 0:
        raise ValueError("negative duration")
    if seconds == 0:
        return "0s"
    parts = []
    for unit, size in UNITS.items():
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
