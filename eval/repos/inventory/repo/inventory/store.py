"""Stock kept per SKU."""


class Inventory:
    """How many of each SKU are in stock."""

    def __init__(self):
        self._stock = {}

    def add(self, sku, quantity=1):
        if quantity < 0:
            raise ValueError("quantity must not be negative")
        self._stock[sku] = self._stock.get(sku, 0) + quantity

    def remove(self, sku, quantity=1):
        if quantity > self.get_item_count(sku):
            raise ValueError(f"only {self.get_item_count(sku)} of {sku} in stock")
        self._stock[sku] -= quantity

    def get_item_count(self, sku):
        """How many of `sku` are in stock (0 for an unknown SKU)."""
        return self._stock.get(sku, 0)

    def skus(self):
        """The SKUs ever added, sorted."""
        return sorted(self._stock)
