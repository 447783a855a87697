import unittest

from durations import format_duration, parse_duration


class ParseDurationTest(unittest.TestCase):
    def test_one_unit(self):
        self.assertEqual(parse_duration("45s"), 45)
        self.assertEqual(parse_duration("2h"), 7200)

    def test_hours_and_minutes(self):
        self.assertEqual(parse_duration("1h30m"), 5400)

    def test_not_a_duration(self):
        with self.assertRaises(ValueError):
            parse_duration("soon")


class FormatDurationTest(unittest.TestCase):
    def test_format(self):
        self.assertEqual(format_duration(5400), "1h30m")
        self.assertEqual(format_duration(0), "0s")


if __name__ == "__main__":
    unittest.main()
