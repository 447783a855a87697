"""Version numbers."""

from .semver import compare, latest, parse_version

__all__ = ["compare", "latest", "parse_version"]
