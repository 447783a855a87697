"""URL slugs."""

import re
import unicodedata


def slugify(text, max_length=None):
    """`text` as a URL slug: its words in ASCII lower case, joined by "-".

    slugify("Hello, World!") == "hello-world"
    """
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    words = re.findall(r"[a-z0-9]+", text.lower())
    slug = "-".join(words)
    if max_length is not None:
        slug = slug[:max_length].rstrip("-")
    return slug
