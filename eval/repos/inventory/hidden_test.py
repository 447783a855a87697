import unittest

from inventory import Inventory, low_stock, summary


def sample():
    stock = Inventory()
    stock.add("apple", 3)
    stock.add("pear", 10)
    stock.add("fig")
    return stock


class Hidden(unittest.TestCase):
    def test_count(self):
        stock = sample()
        self.assertEqual(stock.count("apple"), 3)
        self.assertEqual(stock.count("fig"), 1)
        self.assertEqual(stock.count("plum"), 0)

    def test_old_name_is_gone(self):
        self.assertFalse(hasattr(Inventory, "get_item_count"))
        self.assertFalse(hasattr(sample(), "get_item_count"))

    def test_remove(self):
        stock = sample()
        stock.remove("pear", 4)
        self.assertEqual(stock.count("pear"), 6)
        with self.assertRaises(ValueError):
            stock.remove("apple", 4)
        self.assertEqual(stock.count("apple"), 3)

    def test_reports(self):
        stock = sample()
        stock.remove("pear", 6)
        self.assertEqual(low_stock(stock), ["apple", "fig", "pear"])
        self.assertEqual(low_stock(stock, threshold=2), ["fig"])
        self.assertEqual(summary(stock), "apple: 3\nfig: 1\npear: 4\ntotal: 8")
        self.assertEqual(summary(Inventory()), "total: 0")


if __name__ == "__main__":
    unittest.main()
