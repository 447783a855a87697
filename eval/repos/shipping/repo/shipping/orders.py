"""Quotes for the checkout's orders."""

from .rates import shipping_cost


def quote(order):
    """The shipping of `order`, a dict with "weight_kg" and optionally "zone"
    and "express": {"zone": ..., "express": ..., "cost": ...}."""
    zone = order.get("zone", "international")
    express = bool(order.get("express", False))
    return {"zone": zone, "express": express, "cost": shipping_cost(order["weight_kg"], zone, express)}
