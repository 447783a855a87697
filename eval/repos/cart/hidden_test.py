import unittest

from cart import discount_percent, subtotal, total

LAMPS = [("lamp", 100.0, 2)]


class Hidden(unittest.TestCase):
    def test_percentages(self):
        self.assertEqual(total(LAMPS, "SAVE10"), 180.0)
        self.assertEqual(total([("mug", 20.0, 4)], "SAVE25"), 60.0)
        self.assertEqual(total([("mug", 20.0, 4)], "HALF"), 40.0)
        self.assertEqual(total([("pen", 1.5, 3)], "save10"), 4.05)

    def test_no_coupon(self):
        self.assertEqual(total(LAMPS), 200.0)
        self.assertEqual(total(LAMPS, None), 200.0)
        self.assertEqual(total(LAMPS, ""), 200.0)
        self.assertEqual(total([]), 0)

    def test_unknown(self):
        with self.assertRaises(KeyError):
            total(LAMPS, "FREE")

    def test_unchanged(self):
        self.assertEqual(discount_percent("half"), 50)
        self.assertEqual(subtotal(LAMPS), 200.0)


if __name__ == "__main__":
    unittest.main()
