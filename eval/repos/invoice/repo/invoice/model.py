"""An invoice: its lines and how it is printed."""

from .money import format_amount


class Invoice:
    def __init__(self, number, currency="EUR"):
        self.number = number
        self.currency = currency
        self.lines = []

    def add_line(self, description, quantity, unit_price):
        self.lines.append((description, quantity, unit_price))

    def total(self):
        return round(sum(quantity * price for _, quantity, price in self.lines), 2)

    def render(self):
        """The invoice as text: its number, a line per item, then the total."""
        out = [f"Invoice {self.number}"]
        for description, quantity, unit_price in self.lines:
            out.append(f"{quantity} x {description} @ {format_amount(unit_price)}")
        out.append(f"Total: {format_amount(self.total())}")
        return "\n".join(out)
