"""Shipping prices."""

from .orders import quote
from .rates import ZONES, shipping_cost

__all__ = ["ZONES", "quote", "shipping_cost"]
