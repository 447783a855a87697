"""What a cart costs."""

from .coupons import discount_percent


def subtotal(items):
    """The sum of price * quantity over `items`, (name, price, quantity) tuples."""
    return round(sum(price * quantity for _, price, quantity in items), 2)


def total(items, coupon=None):
    """What the customer pays: the subtotal less the coupon's discount, in cents."""
    amount = subtotal(items)
    amount -= amount * discount_percent(coupon) / 100
    return round(max(amount, 0), 2)
