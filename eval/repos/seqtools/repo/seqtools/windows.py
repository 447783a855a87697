"""Windows over sequences."""


def sliding_windows(seq, size):
    """Every run of `size` consecutive items of `seq`, as tuples, in order.

    sliding_windows([1, 2, 3, 4], 3) == [(1, 2, 3), (2, 3, 4)]. A size larger
    than the sequence gives no window; a size below 1 is a ValueError.
    """
    if size < 1:
        raise ValueError("size must be at least 1")
    items = list(seq)
    return [tuple(items[start:start + size]) for start in range(len(items) - size)]


def pairwise(seq):
    """Each item of `seq` with the next one, as pairs."""
    return sliding_windows(seq, 2)
