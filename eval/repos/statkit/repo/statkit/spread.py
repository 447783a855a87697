"""Measures of how spread out a list of numbers is."""

from .central import mean


def variance(values):
    """The population variance of `values`."""
    centre = mean(values)
    return sum((value - centre) ** 2 for value in values) / len(values)
