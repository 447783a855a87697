import unittest

from shipping import quote, shipping_cost


class ShippingCostTest(unittest.TestCase):
    def test_default_zone_is_domestic(self):
        self.assertEqual(shipping_cost(2.0), 9.0)

    def test_zones(self):
        self.assertEqual(shipping_cost(2.0, "europe"), 18.0)
        self.assertEqual(shipping_cost(1.0, "international"), 23.0)

    def test_express(self):
        self.assertEqual(shipping_cost(2.0, "europe", express=True), 36.0)


class QuoteTest(unittest.TestCase):
    def test_quote_with_zone(self):
        self.assertEqual(
            quote({"weight_kg": 2.0, "zone": "europe"}),
            {"zone": "europe", "express": False, "cost": 18.0},
        )


if __name__ == "__main__":
    unittest.main()
