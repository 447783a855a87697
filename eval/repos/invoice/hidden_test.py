import unittest

from invoice import Invoice, format_amount


def sample(currency=None):
    bill = Invoice("2024-017") if currency is None else Invoice("2024-017", currency=currency)
    bill.add_line("Notebook", 2, 3.5)
    bill.add_line("Pen", 5, 1.1)
    return bill


class Hidden(unittest.TestCase):
    def test_format_amount(self):
        self.assertEqual(format_amount(12.5), "12.50 EUR")
        self.assertEqual(format_amount(3, "GBP"), "3.00 GBP")
        self.assertEqual(format_amount(0.1, "USD"), "0.10 USD")

    def test_render_in_dollars(self):
        self.assertEqual(
            sample("USD").render(),
            "Invoice 2024-017\n2 x Notebook @ 3.50 USD\n5 x Pen @ 1.10 USD\nTotal: 12.50 USD",
        )

    def test_render_default(self):
        self.assertEqual(
            sample().render(),
            "Invoice 2024-017\n2 x Notebook @ 3.50 EUR\n5 x Pen @ 1.10 EUR\nTotal: 12.50 EUR",
        )

    def test_empty(self):
        self.assertEqual(Invoice("X", currency="CHF").render(), "Invoice X\nTotal: 0.00 CHF")


if __name__ == "__main__":
    unittest.main()
