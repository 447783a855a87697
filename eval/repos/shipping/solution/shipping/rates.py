"""What sending a parcel costs."""

ZONES = {
    # zone: (base price, price per kg)
    "domestic": (5.0, 2.0),
    "europe": (9.0, 4.5),
    "international": (15.0, 8.0),
}
EXPRESS_FACTOR = 2.0


def shipping_cost(weight_kg, zone="domestic", express=False):
    """The price of sending a parcel of `weight_kg` to `zone`, rounded to cents."""
    if weight_kg <= 0:
        raise ValueError("weight must be positive")
    if zone not in ZONES:
        raise ValueError(f"unknown zone: {zone}")
    base, per_kg = ZONES[zone]
    price = base + per_kg * weight_kg
    if express:
        price *= EXPRESS_FACTOR
    return round(price, 2)
