import unittest

from inventory import Inventory, low_stock, summary


def sample():
    stock = Inventory()
    stock.add("apple", 3)
    stock.add("pear", 10)
    return stock


class InventoryTest(unittest.TestCase):
    def test_count(self):
        stock = sample()
        self.assertEqual(stock.count("apple"), 3)
        self.assertEqual(stock.count("plum"), 0)

    def test_old_name_is_gone(self):
        self.assertFalse(hasattr(Inventory, "get_item_count"))


class ReportTest(unittest.TestCase):
    def test_low_stock(self):
        self.assertEqual(low_stock(sample()), ["apple"])

    def test_summary(self):
        self.assertEqual(summary(sample()), "apple: 3\npear: 10\ntotal: 13")


if __name__ == "__main__":
    unittest.main()
