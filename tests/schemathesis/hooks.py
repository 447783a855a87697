"""Schemathesis hooks (loaded through SCHEMATHESIS_HOOKS by run.sh).

POST /v1/uploads takes an archive's raw bytes under its own media types,
which Schemathesis cannot make up from a schema: these strategies draw real
archives, a gzip-compressed tar and a zip, of a few small files with names
that stay in the tree, so that every generated upload is one the server
should keep (201). The refusals (corrupt, escaping, too large, other media
types) are tests/api/uploads.rs's to check.
"""

import io
import tarfile
import zipfile

import schemathesis
from hypothesis import strategies as st

NAMES = st.lists(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=12),
    min_size=1,
    max_size=3,
).map(lambda parts: "/".join(parts))
FILES = st.dictionaries(NAMES, st.binary(max_size=256), max_size=5)


def _disjoint(files):
    # A path that is also another's folder ("a" and "a/b") cannot be in one tree.
    names = sorted(files)
    return {
        name: data
        for name, data in files.items()
        if not any(other.startswith(name + "/") for other in names)
    }


def _tar_gz(files):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in _disjoint(files).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _zip(files):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in _disjoint(files).items():
            archive.writestr(name, data)
    return out.getvalue()


schemathesis.openapi.media_type(
    "application/gzip", FILES.map(_tar_gz), aliases=["application/x-gzip"]
)
schemathesis.openapi.media_type(
    "application/zip", FILES.map(_zip), aliases=["application/x-zip-compressed"]
)
