import unittest

from durations import format_duration, parse_duration


class Hidden(unittest.TestCase):
    def test_parts_add_up(self):
        self.assertEqual(parse_duration("1h30m"), 5400)
        self.assertEqual(parse_duration("2h15m"), 8100)
        self.assertEqual(parse_duration("1d2h3m4s"), 93784)
        self.assertEqual(parse_duration("2d 4h"), 187200)
        self.assertEqual(parse_duration(" 1H 30M "), 5400)

    def test_one_part(self):
        self.assertEqual(parse_duration("90s"), 90)
        self.assertEqual(parse_duration("3d"), 259200)
        self.assertEqual(parse_duration("0s"), 0)

    def test_round_trip(self):
        for seconds in (1, 59, 61, 3600, 5400, 86399, 93784):
            self.assertEqual(parse_duration(format_duration(seconds)), seconds)

    def test_errors(self):
        for text in ("", "abc", "5x", "1h30", "h1", "1h-30m"):
            with self.assertRaises(ValueError, msg=text):
                parse_duration(text)


if __name__ == "__main__":
    unittest.main()
