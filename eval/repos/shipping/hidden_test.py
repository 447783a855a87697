import unittest

from shipping import quote, shipping_cost


class Hidden(unittest.TestCase):
    def test_default_zone(self):
        self.assertEqual(shipping_cost(2.0), 9.0)
        self.assertEqual(shipping_cost(0.5), 6.0)
        self.assertEqual(shipping_cost(2.0, express=True), 18.0)

    def test_explicit_zones_unchanged(self):
        self.assertEqual(shipping_cost(2.0, "international"), 31.0)
        self.assertEqual(shipping_cost(2.0, "europe"), 18.0)
        self.assertEqual(shipping_cost(2.0, "domestic"), 9.0)

    def test_quote_default_zone(self):
        self.assertEqual(quote({"weight_kg": 2.0}), {"zone": "domestic", "express": False, "cost": 9.0})
        self.assertEqual(quote({"weight_kg": 1.0, "express": True}),
                         {"zone": "domestic", "express": True, "cost": 14.0})

    def test_quote_with_zone(self):
        self.assertEqual(quote({"weight_kg": 2.0, "zone": "international"})["cost"], 31.0)

    def test_errors(self):
        with self.assertRaises(ValueError):
            shipping_cost(0)
        with self.assertRaises(ValueError):
            shipping_cost(1.0, "mars")


if __name__ == "__main__":
    unittest.main()
