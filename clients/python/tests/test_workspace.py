"""Repositories in, patches out: uploads (.tar.gz and .zip) and a git clone
seed workspaces; a run's diff, its ``changes`` and its workspace as a
.tar.gz come back; what is refused is refused with the server's code."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import tempfile
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest
from support import Server, free_port, scripted

from agent_runner import AgentRunnerError, AsyncClient, Changes, Client, Run, Upload
from agent_runner._base import archive_type, upload_headers

LIB = "pub fn f() {}\n"
PATCHED = "pub fn f() -> u32 {\n    1\n}\n"
PATCH = (
    "--- a/src/lib.rs\n"
    "+++ b/src/lib.rs\n"
    "@@ -1 +1,3 @@\n"
    "-pub fn f() {}\n"
    "+pub fn f() -> u32 {\n"
    "+    1\n"
    "+}\n"
)


@pytest.fixture(scope="module")
def repos() -> Iterator[Path]:
    """A folder with one git repository, ``app``: ``hello.txt`` is ``hello``
    at tag ``v1`` and ``hello again`` at ``v2``, the head of ``main``."""
    with tempfile.TemporaryDirectory(prefix="agent-runner-repos-") as folder:
        app = Path(folder) / "app"
        app.mkdir()
        env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
        identity = ["-c", "user.name=Client Tests", "-c", "user.email=tests@example.com"]

        def git(*args: str) -> None:
            subprocess.run(
                ["git", *identity, *args],
                cwd=app,
                env=env,
                check=True,
                capture_output=True,
            )

        git("init", "-q", "-b", "main")
        for tag, text in (("v1", "hello\n"), ("v2", "hello again\n")):
            (app / "hello.txt").write_text(text)
            git("add", "-A")
            git("commit", "-q", "-m", tag)
            git("tag", tag)
        yield Path(folder)


@pytest.fixture(scope="module")
def seeding_server(repos: Path) -> Iterator[Server]:
    """A server that clones from the repositories of ``repos``."""
    server = Server(f'[workspaces]\ngit_allow = ["file://{repos}/"]\n')
    yield server
    server.stop()


@pytest.fixture
def seeding(seeding_server: Server) -> Iterator[Client]:
    """A client of that server."""
    with Client(seeding_server.url) as client:
        yield client


def tar_gz(files: dict[str, str], links: Optional[dict[str, str]] = None) -> bytes:
    """A .tar.gz of ``files`` (path to text) and symbolic ``links`` (path to target)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for path, target in (links or {}).items():
            info = tarfile.TarInfo(path)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            archive.addfile(info)
    return buffer.getvalue()


def zip_of(files: dict[str, str]) -> bytes:
    """A .zip of ``files`` (path to text)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return buffer.getvalue()


def entries(archive: bytes) -> dict[str, Any]:
    """The entries of a .tar.gz: path (without ``./`` or a trailing ``/``) to a
    regular file's text, or ``None`` for anything else."""
    found: dict[str, Any] = {}
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as opened:
        for member in opened.getmembers():
            path = member.name
            while path.startswith("./"):
                path = path[2:]
            path = path.rstrip("/")
            if path in ("", "."):
                continue
            file = opened.extractfile(member) if member.isfile() else None
            found[path] = file.read().decode(errors="replace") if file is not None else None
    return found


def patch_then_note() -> dict[str, Any]:
    """A model that patches src/lib.rs, writes NOTES.md, then answers ``Done``."""
    return scripted(
        {
            "content": "",
            "tool_calls": [{"id": "p1", "name": "apply_patch", "arguments": {"patch": PATCH}}],
        },
        {
            "content": "",
            "tool_calls": [
                {
                    "id": "w1",
                    "name": "write_file",
                    "arguments": {"path": "NOTES.md", "content": "# notes\n"},
                }
            ],
        },
        {"content": "Done"},
    )


def assert_patched(diff: str) -> None:
    """``diff`` holds the patch of src/lib.rs and the new NOTES.md, as git writes them."""
    lines = diff.splitlines()
    assert "diff --git a/src/lib.rs b/src/lib.rs" in lines
    assert "-pub fn f() {}" in lines and "+pub fn f() -> u32 {" in lines
    assert "diff --git a/NOTES.md b/NOTES.md" in lines
    assert any(line.startswith("new file mode") for line in lines)
    assert "+# notes" in lines


def refused(call: Any) -> AgentRunnerError:
    """The AgentRunnerError ``call()`` raises."""
    with pytest.raises(AgentRunnerError) as raised:
        call()
    return raised.value


def test_a_tar_gz_upload_seeds_a_run_whose_diff_changes_and_archive_show_the_patch(
    seeding: Client, tmp_path: Path
) -> None:
    archive = tmp_path / "project.tar.gz"
    archive.write_bytes(tar_gz({"src/lib.rs": LIB, "README.md": "from the archive\n"}))

    upload = seeding.upload_file(archive)

    assert isinstance(upload, Upload)
    assert uuid.UUID(upload.id)
    assert (upload.size, upload.files) == (archive.stat().st_size, 2)
    assert upload.created_at
    assert seeding.get_upload(upload.id) == upload

    run = seeding.create_run(
        "Make f return 1",
        tools=["apply_patch", "write_file"],
        # `files` are written last, over the archive's.
        workspace={"archive": upload.id, "files": {"README.md": "from the request\n"}},
        model=patch_then_note(),
        wait=True,
    )
    assert run.status == "completed", run.error
    assert "apply_patch" in run.tools
    results = [m for m in seeding.messages(run.id) if m["role"] == "tool"]
    assert [(m["call_id"], m["is_error"]) for m in results] == [("p1", False), ("w1", False)]

    diff = seeding.diff(run.id)
    assert_patched(diff)
    assert "README.md" not in diff, "the seed is where the diff starts"
    assert run.changes == Changes(files=2, insertions=4, deletions=1)

    files = entries(seeding.archive(run.id))
    assert files["src/lib.rs"] == PATCHED
    assert files["NOTES.md"] == "# notes\n"
    assert files["README.md"] == "from the request\n"

    saved = tmp_path / "out" / "workspace.tar.gz"
    saved.parent.mkdir()
    written = seeding.save_archive(run.id, saved)
    assert written == saved.stat().st_size > 0
    assert entries(saved.read_bytes()) == files


def test_a_live_run_s_diff_is_its_workspace_now_and_changes_come_at_its_end(
    seeding: Client,
) -> None:
    run = seeding.create_run(
        "Patch, then ask",
        tools=["apply_patch", "write_file"],
        approval=["write_file"],
        workspace={"files": {"src/lib.rs": LIB}},
        model=patch_then_note(),
    )
    for event in seeding.events(run.id):
        if event.type == "actions_required":
            paused = seeding.get_run(run.id)
            assert paused.status == "requires_action" and paused.changes is None
            during = seeding.diff(run.id)
            assert "+pub fn f() -> u32 {" in during.splitlines()
            assert "NOTES.md" not in during, "not written yet"
            seeding.approve(run.id, "w1")

    ended = seeding.get_run(run.id)
    assert ended.status == "completed", ended.error
    assert_patched(seeding.diff(run.id))
    assert ended.changes == Changes(files=2, insertions=4, deletions=1)


def test_a_run_that_changes_nothing_has_an_empty_diff(seeding: Client) -> None:
    run = seeding.create_run(
        "Look only",
        workspace={"files": {"a.txt": "a\n"}},
        model=scripted({"content": "Nothing to do"}),
        wait=True,
    )
    assert seeding.diff(run.id) == ""
    assert run.changes == Changes(files=0, insertions=0, deletions=0)


@pytest.mark.anyio
async def test_a_zip_upload_with_the_async_client(seeding_server: Server) -> None:
    async with AsyncClient(seeding_server.url) as client:
        upload = await client.upload(
            zip_of({"docs/guide.md": "# Guide\n", "src/lib.rs": LIB}), "application/zip"
        )
        assert upload.files == 2
        assert await client.get_upload(upload.id) == upload
        run = await client.create_run(
            "Add a line",
            tools=["write_file"],
            workspace={"archive": upload.id},
            model=scripted(
                {
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "w",
                            "name": "write_file",
                            "arguments": {
                                "path": "docs/guide.md",
                                "content": "# Guide\nRead me.\n",
                            },
                        }
                    ],
                },
                {"content": "Done"},
            ),
            wait=True,
        )
        diff = await client.diff(run.id)
        archive = await client.archive(run.id)
        with tempfile.TemporaryDirectory() as folder:
            saved = Path(folder) / "w.tar.gz"
            written = await client.save_archive(run.id, saved)
            saved_bytes = saved.read_bytes()
        await client.delete_upload(upload.id)
        with pytest.raises(AgentRunnerError) as gone:
            await client.get_upload(upload.id)

    assert run.status == "completed", run.error
    assert "diff --git a/docs/guide.md b/docs/guide.md" in diff.splitlines()
    assert "+Read me." in diff.splitlines()
    assert run.changes == Changes(files=1, insertions=1, deletions=0)
    assert entries(archive)["src/lib.rs"] == LIB
    assert written == len(saved_bytes) and entries(saved_bytes) == entries(archive)
    assert (gone.value.status, gone.value.code) == (404, "upload_not_found")


def test_a_git_clone_seeds_a_run_at_its_ref(seeding: Client, repos: Path) -> None:
    run = seeding.create_run(
        "Greet differently",
        tools=["write_file"],
        workspace={"git": {"url": f"file://{repos}/app", "ref": "v1"}},
        model=scripted(
            {
                "content": "",
                "tool_calls": [
                    {
                        "id": "w",
                        "name": "write_file",
                        "arguments": {"path": "hello.txt", "content": "changed\n"},
                    }
                ],
            },
            {"content": "Done"},
        ),
        wait=True,
    )
    assert run.status == "completed", run.error
    lines = seeding.diff(run.id).splitlines()
    assert "-hello" in lines, "against v1, not the branch's head"
    assert "+changed" in lines
    assert run.changes == Changes(files=1, insertions=1, deletions=1)

    without = entries(seeding.archive(run.id))
    assert without["hello.txt"] == "changed\n"
    assert not any(path == ".git" or path.startswith(".git/") for path in without)
    with_git = entries(seeding.archive(run.id, include_git=True))
    assert any(path.startswith(".git/") for path in with_git)


def test_uploads_that_are_refused(seeding: Client) -> None:
    escaping = refused(
        lambda: seeding.upload(tar_gz({"ok.txt": "ok", "../escape.txt": "out"}), "application/gzip")
    )
    assert (escaping.status, escaping.code) == (422, "invalid_archive")
    link_out = refused(
        lambda: seeding.upload(
            tar_gz({"ok.txt": "ok"}, links={"out": "../../etc/passwd"}), filename="a.tgz"
        )
    )
    assert (link_out.status, link_out.code) == (422, "invalid_archive")
    corrupt = refused(lambda: seeding.upload(b"not an archive", "application/zip"))
    assert (corrupt.status, corrupt.code) == (422, "invalid_archive")
    wrong_type = refused(lambda: seeding.upload(tar_gz({"a.txt": "a"}), "text/plain"))
    assert (wrong_type.status, wrong_type.code) == (415, "unsupported_media_type")


def test_unknown_uploads_and_runs_are_not_found(seeding: Client, tmp_path: Path) -> None:
    unknown = str(uuid.uuid4())
    for call in (
        lambda: seeding.get_upload(unknown),
        lambda: seeding.delete_upload(unknown),
        lambda: seeding.create_run(
            "hi", workspace={"archive": unknown}, model=scripted({"content": "x"})
        ),
    ):
        error = refused(call)
        assert (error.status, error.code) == (404, "upload_not_found")

    target = tmp_path / "kept.tar.gz"
    target.write_bytes(b"already here")
    for call in (
        lambda: seeding.diff(unknown),
        lambda: seeding.archive(unknown),
        lambda: seeding.save_archive(unknown, target),
    ):
        error = refused(call)
        assert (error.status, error.code) == (404, "not_found")
    assert target.read_bytes() == b"already here", "a refused download leaves the file alone"


def test_a_git_url_the_server_does_not_allow(seeding: Client) -> None:
    error = refused(
        lambda: seeding.create_run("hi", workspace={"git": {"url": "https://example.com/app.git"}})
    )
    assert (error.status, error.code) == (422, "git_not_allowed")
    assert "git_allow" in error.message


# ------------------------------------------------------- no server needed


def test_the_kind_of_an_archive_by_its_name() -> None:
    assert archive_type("project.tar.gz") == "application/gzip"
    assert archive_type(Path("dir/PROJECT.TGZ")) == "application/gzip"
    assert archive_type("project.zip") == "application/zip"
    for name in ("project.tar", "project.gz", "project"):
        with pytest.raises(ValueError):
            archive_type(name)
    assert upload_headers("application/x-gzip", "ignored.zip") == {
        "content-type": "application/x-gzip"
    }
    assert upload_headers(None, "a.zip") == {"content-type": "application/zip"}
    with pytest.raises(ValueError):
        upload_headers(None, None)


def test_an_upload_of_no_known_kind_is_refused_before_it_is_sent() -> None:
    # Nothing listens there: a request would be `unreachable`.
    with Client(f"http://127.0.0.1:{free_port()}") as client:
        with pytest.raises(ValueError):
            client.upload(b"bytes")
        with pytest.raises(ValueError):
            client.upload(b"bytes", filename="a.rar")


def test_changes_are_read_from_the_run_object() -> None:
    base = {"id": str(uuid.uuid4()), "status": "running"}
    assert Run.from_dict(base).changes is None
    assert Run.from_dict({**base, "changes": None}).changes is None
    ended = Run.from_dict(
        {**base, "status": "completed", "changes": {"files": 3, "insertions": 10, "deletions": 2}}
    )
    assert ended.changes == Changes(files=3, insertions=10, deletions=2)
    upload = Upload.from_dict(
        {"id": base["id"], "size": 10, "files": 1, "created_at": "t", "expires_at": None}
    )
    assert (upload.size, upload.files, upload.expires_at) == (10, 1, None)
