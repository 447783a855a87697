"""Stock levels and reports."""

from .report import low_stock, summary
from .store import Inventory

__all__ = ["Inventory", "low_stock", "summary"]
