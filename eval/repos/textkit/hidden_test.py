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


class Hidden(unittest.TestCase):
    def test_no_limit(self):
        self.assertEqual(slugify("Hello, World!"), "hello-world")
        self.assertEqual(slugify("Hello, World!", max_length=None), "hello-world")
        self.assertEqual(slugify("Crème brûlée recipe"), "creme-brulee-recipe")

    def test_cut(self):
        self.assertEqual(slugify("Hello World", max_length=6), "hello")
        self.assertEqual(slugify("Hello World", max_length=5), "hello")
        self.assertEqual(slugify("Hello World", max_length=8), "hello-wo")
        self.assertEqual(slugify("Hello, World Again!", max_length=11), "hello-world")
        self.assertEqual(slugify("Hello World", max_length=3), "hel")

    def test_longer_limit(self):
        self.assertEqual(slugify("Hello World", max_length=50), "hello-world")
        self.assertEqual(slugify("Hello World", max_length=11), "hello-world")

    def test_cli(self):
        self.assertEqual(run_cli("Hello", "World"), "hello-world")
        self.assertEqual(run_cli("--max-length", "5", "Hello World"), "hello")
        self.assertEqual(run_cli("--max-length", "8", "Hello", "World"), "hello-wo")
        self.assertEqual(run_cli("Hello World", "--max-length", "6"), "hello")


if __name__ == "__main__":
    unittest.main()
