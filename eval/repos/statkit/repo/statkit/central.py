"""Measures of the centre of a list of numbers."""


def mean(values):
    """The arithmetic mean of `values`."""
    if not values:
        raise ValueError("mean of no values")
    return sum(values) / len(values)


def median(values):
    """The middle value of `values` once sorted."""
    if not values:
        raise ValueError("median of no values")
    ordered = sorted(values)
    return ordered[len(ordered) // 2]
