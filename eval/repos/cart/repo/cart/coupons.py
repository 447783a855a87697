"""Coupon codes and what they take off, in percent of the subtotal."""

COUPONS = {"SAVE10": 10, "SAVE25": 25, "HALF": 50}


def discount_percent(code):
    """The percentage `code` takes off (0 for no code); KeyError for an unknown one."""
    if not code:
        return 0
    return COUPONS[code.upper()]
