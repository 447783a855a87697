import unittest

from versions import compare, latest, parse_version


class VersionsTest(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(parse_version("1.4.2"), (1, 4, 2))

    def test_compare(self):
        self.assertEqual(compare("1.9.3", "1.10.0"), -1)
        self.assertEqual(compare("2.0.0", "2.0.0"), 0)

    def test_latest(self):
        self.assertEqual(latest(["1.2.0", "1.10.0", "1.9.3"]), "1.10.0")

    def test_git_tags(self):
        self.assertEqual(latest(["v1.2.0", "v1.10.0", "v1.9.3"]), "v1.10.0")


if __name__ == "__main__":
    unittest.main()
