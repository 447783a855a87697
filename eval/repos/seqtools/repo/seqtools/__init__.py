"""Helpers over sequences."""

from .chunks import chunked
from .windows import pairwise, sliding_windows

__all__ = ["chunked", "pairwise", "sliding_windows"]
