"""Reports on an Inventory."""


def low_stock(inventory, threshold=5):
    """The SKUs with fewer than `threshold` in stock, sorted."""
    return [sku for sku in inventory.skus() if inventory.get_item_count(sku) < threshold]


def summary(inventory):
    """One line per SKU ("apple: 3"), then the total ("total: 9")."""
    lines = [f"{sku}: {inventory.get_item_count(sku)}" for sku in inventory.skus()]
    total = sum(inventory.get_item_count(sku) for sku in inventory.skus())
    lines.append(f"total: {total}")
    return "\n".join(lines)
