"""python3 -m textkit.cli TEXT...: prints the slug of TEXT."""

import argparse

from .slug import slugify


def main(argv=None):
    parser = argparse.ArgumentParser(prog="slugify", description="Print the URL slug of a text.")
    parser.add_argument("text", nargs="+", help="the text (several words are joined by spaces)")
    args = parser.parse_args(argv)
    print(slugify(" ".join(args.text)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
