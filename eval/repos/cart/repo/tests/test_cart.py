import unittest

from cart import discount_percent, subtotal, total

LAMPS = [("lamp", 100.0, 2)]


class CartTest(unittest.TestCase):
    def test_subtotal(self):
        self.assertEqual(subtotal(LAMPS + [("bulb", 2.5, 4)]), 210.0)

    def test_no_coupon(self):
        self.assertEqual(total(LAMPS), 200.0)

    def test_coupon(self):
        self.assertEqual(discount_percent("SAVE10"), 10)
        self.assertEqual(total(LAMPS, "SAVE10"), 180.0)


if __name__ == "__main__":
    unittest.main()
