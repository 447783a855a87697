"""Invoices as plain text."""

from .model import Invoice
from .money import format_amount

__all__ = ["Invoice", "format_amount"]
