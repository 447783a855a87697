"""A to-do list in a text file."""

from .model import PRIORITIES, Task
from .storage import dumps, loads

__all__ = ["PRIORITIES", "Task", "dumps", "loads"]
