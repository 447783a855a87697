"""Parse and format durations such as "1h30m"."""

from .format import format_duration
from .parser import parse_duration

__all__ = ["format_duration", "parse_duration"]
