"""Checkout arithmetic."""

from .checkout import subtotal, total
from .coupons import discount_percent

__all__ = ["discount_percent", "subtotal", "total"]
