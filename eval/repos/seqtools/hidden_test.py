import unittest

from seqtools import chunked, pairwise, sliding_windows


class Hidden(unittest.TestCase):
    def test_pairwise(self):
        self.assertEqual(pairwise([1, 2, 3]), [(1, 2), (2, 3)])
        self.assertEqual(pairwise("ab"), [("a", "b")])
        self.assertEqual(pairwise([1]), [])
        self.assertEqual(pairwise([]), [])

    def test_windows(self):
        self.assertEqual(sliding_windows("abcd", 2), [("a", "b"), ("b", "c"), ("c", "d")])
        self.assertEqual(sliding_windows([1, 2, 3, 4], 3), [(1, 2, 3), (2, 3, 4)])
        self.assertEqual(sliding_windows([1, 2, 3], 3), [(1, 2, 3)])
        self.assertEqual(sliding_windows([1, 2, 3], 1), [(1,), (2,), (3,)])
        self.assertEqual(sliding_windows(iter([5, 6, 7]), 2), [(5, 6), (6, 7)])

    def test_too_large(self):
        self.assertEqual(sliding_windows([1, 2], 3), [])
        self.assertEqual(sliding_windows([], 1), [])

    def test_bad_size(self):
        for size in (0, -1):
            with self.assertRaises(ValueError):
                sliding_windows([1, 2], size)

    def test_chunked(self):
        self.assertEqual(chunked(range(5), 2), [[0, 1], [2, 3], [4]])
        self.assertEqual(chunked([], 3), [])


if __name__ == "__main__":
    unittest.main()
