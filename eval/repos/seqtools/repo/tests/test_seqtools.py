import unittest

from seqtools import chunked, pairwise, sliding_windows


class WindowsTest(unittest.TestCase):
    def test_pairwise(self):
        self.assertEqual(pairwise([1, 2, 3]), [(1, 2), (2, 3)])

    def test_windows_of_three(self):
        self.assertEqual(sliding_windows([1, 2, 3, 4], 3), [(1, 2, 3), (2, 3, 4)])

    def test_bad_size(self):
        with self.assertRaises(ValueError):
            sliding_windows([1, 2], 0)


class ChunkedTest(unittest.TestCase):
    def test_chunked(self):
        self.assertEqual(chunked(range(5), 2), [[0, 1], [2, 3], [4]])


if __name__ == "__main__":
    unittest.main()
