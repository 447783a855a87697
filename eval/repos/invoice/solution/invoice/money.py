"""Amounts of money as text."""


def format_amount(amount, currency="EUR"):
    """`amount` with two decimals and its currency: format_amount(12.5) == "12.50 EUR"."""
    return f"{amount:.2f} {currency}"
