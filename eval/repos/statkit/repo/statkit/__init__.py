"""Summary statistics."""

from .central import mean, median
from .spread import variance

__all__ = ["mean", "median", "variance"]
