import unittest

from invoice import Invoice, format_amount


def sample(currency):
    bill = Invoice("2024-017", currency=currency)
    bill.add_line("Notebook", 2, 3.5)
    bill.add_line("Pen", 5, 1.1)
    return bill


class InvoiceTest(unittest.TestCase):
    def test_format_amount(self):
        self.assertEqual(format_amount(12.5), "12.50 EUR")

    def test_total(self):
        self.assertEqual(sample("EUR").total(), 12.5)

    def test_render_in_euros(self):
        self.assertEqual(sample("EUR").render().splitlines()[-1], "Total: 12.50 EUR")

    def test_render_in_dollars(self):
        self.assertEqual(sample("USD").render().splitlines()[-1], "Total: 12.50 USD")


if __name__ == "__main__":
    unittest.main()
