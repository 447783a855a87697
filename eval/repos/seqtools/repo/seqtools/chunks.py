"""Cutting a sequence into pieces."""


def chunked(seq, size):
    """The items of `seq` in lists of `size`; the last list may be shorter."""
    if size < 1:
        raise ValueError("size must be at least 1")
    items = list(seq)
    return [items[start:start + size] for start in range(0, len(items), size)]
