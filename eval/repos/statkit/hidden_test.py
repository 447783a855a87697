import unittest

from statkit import mean, median, variance


class Hidden(unittest.TestCase):
    def test_even(self):
        self.assertEqual(median([1, 2, 3, 4]), 2.5)
        self.assertEqual(median([4, 1, 3, 2]), 2.5)
        self.assertEqual(median([1, 1, 2, 2]), 1.5)
        self.assertEqual(median([10, 20]), 15)
        self.assertEqual(median([-3, 5, 1, 7, 2, 9]), 3.5)

    def test_odd(self):
        self.assertEqual(median([3, 1, 2]), 2)
        self.assertEqual(median([5]), 5)
        self.assertEqual(median([9, 1, 5, 3, 7]), 5)

    def test_input_unchanged(self):
        values = [4, 1, 3, 2]
        median(values)
        self.assertEqual(values, [4, 1, 3, 2])

    def test_empty(self):
        for function in (mean, median, variance):
            with self.assertRaises(ValueError):
                function([])


if __name__ == "__main__":
    unittest.main()
