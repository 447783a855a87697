import unittest

from versions import compare, latest, parse_version


class Hidden(unittest.TestCase):
    def test_prefix(self):
        self.assertEqual(parse_version("v1.2.3"), (1, 2, 3))
        self.assertEqual(parse_version("1.2.3"), (1, 2, 3))
        self.assertEqual(latest(["v1.2.0", "v1.10.0", "v1.9.3"]), "v1.10.0")
        self.assertEqual(compare("v2.0.0", "2.0.0"), 0)
        self.assertEqual(compare("v2.0.1", "v2.0.0"), 1)

    def test_two_parts(self):
        self.assertEqual(parse_version("2.1"), (2, 1, 0))
        self.assertEqual(parse_version("v2.1"), (2, 1, 0))
        self.assertEqual(compare("2.1", "2.1.0"), 0)
        self.assertEqual(latest(["2.1", "2.0.9"]), "2.1")

    def test_still_invalid(self):
        for text in ("", "v", "abc", "1.2.3.4", "1.x.3", "v1..2"):
            with self.assertRaises(ValueError, msg=text):
                parse_version(text)
        with self.assertRaises(ValueError):
            latest([])


if __name__ == "__main__":
    unittest.main()
