"""Version numbers as MAJOR.MINOR.PATCH."""


def parse_version(text):
    """(major, minor, patch) of a version such as "1.4.2", as integers."""
    cleaned = text.strip()
    if cleaned.startswith("v"):
        cleaned = cleaned[1:]
    parts = cleaned.split(".")
    if len(parts) == 2:
        parts.append("0")
    if len(parts) != 3:
        raise ValueError(f"not a version: {text!r}")
    if not all(part.isdigit() for part in parts):
        raise ValueError(f"not a version: {text!r}")
    return tuple(int(part) for part in parts)


def compare(a, b):
    """-1, 0 or 1 as version `a` is older than, the same as, or newer than `b`."""
    left, right = parse_version(a), parse_version(b)
    return (left > right) - (left < right)


def latest(versions):
    """The newest of `versions` (strings), as it is written."""
    if not versions:
        raise ValueError("no versions")
    return max(versions, key=parse_version)
