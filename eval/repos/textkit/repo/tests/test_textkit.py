import contextlib
import io
import unittest

from textkit import slugify
from textkit.cli import main


def run_cli(*argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(list(argv))
    return out.getvalue().strip()


class SlugifyTest(unittest.TestCase):
    def test_slugify(self):
        self.assertEqual(slugify("Hello, World!"), "hello-world")
        self.assertEqual(slugify("Crème brûlée"), "creme-brulee")

    def test_max_length(self):
        self.assertEqual(slugify("Hello, World Again!", max_length=11), "hello-world")


class CliTest(unittest.TestCase):
    def test_cli(self):
        self.assertEqual(run_cli("Hello", "World"), "hello-world")

    def test_cli_max_length(self):
        self.assertEqual(run_cli("--max-length", "5", "Hello World"), "hello")


if __name__ == "__main__":
    unittest.main()
