#!/usr/bin/env python3
"""Writes the task set's small repositories (`eval/tasks/repos.jsonl`): ten
small Python projects, each with an issue filed against it as a user would
("parse_duration('1h30m') returns 1800 instead of 5400"), a visible test
that fails until the issue is fixed, and hidden tests, never in the
request, that score the result.

Each repository lives under `eval/repos/NAME/` as files, so that it can be
read, run and changed as the small project it is:

    repo/             the files of the run's workspace (a package, README.md,
                      tests/ with the visible test)
    issue.md          the issue, the prompt of both modes
    hidden_test.py    the hidden tests, put at the repository's root to score
    solution/         a reference fix (only the files it changes): --verify
                      checks that the visible and hidden tests fail on repo/
                      and pass once it is laid over

A task is a run request whose workspace holds every file of `repo/`, with
the tools of `--tools` and the `tests` preset of `eval/server.toml`
(`python3 -m unittest`, the visible tests; `check = true`), and a check
`{"repo": {"hidden": {"hidden_test.py": TEXT}, "command": [...]}}`:
`run.py` downloads the workspace after the run, adds the hidden tests and
runs the command. Its `one_shot` form asks the same model, without tools,
with every file of the repository in the prompt, to answer each file it
changes whole after a line `### PATH`; `run.py` writes those files over the
repository and runs the same hidden tests.

    python3 eval/build_repo_tasks.py --verify          # the tasks are sound
    python3 eval/build_repo_tasks.py                   # eval/tasks/repos.jsonl
    python3 eval/build_repo_tasks.py --tools read_file,apply_patch,search,list_dir,run_command

Standard library only.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPOS = os.path.join(HERE, "repos")
OUT = os.path.join(HERE, "tasks", "repos.jsonl")

# The tools of the harness's runs; --tools changes them (a server with
# `apply_patch` can be given it in place of `edit_file`).
TOOLS = ["read_file", "edit_file", "write_file", "search", "list_dir", "run_command"]
COMMAND = "tests"  # the preset of eval/server.toml that runs the visible tests
HIDDEN = "hidden_test.py"
HIDDEN_COMMAND = ["python3", "-m", "unittest", "-q", "hidden_test"]

# (name, what kind of change, how many files the reference fix changes)
TASKS = [
    ("durations", "bug fix: parts overwrite the total instead of adding up", 1),
    ("seqtools", "off-by-one: the last window is missing", 1),
    ("shipping", "wrong default, written in two places", 2),
    ("inventory", "rename a method and update its callers", 2),
    ("textkit", "small feature through a function and its command line", 2),
    ("versions", "missing edge cases: a 'v' prefix, two-part versions", 1),
    ("invoice", "small feature: pass a currency through", 2),
    ("cart", "bug fix: a percentage taken off as an amount", 1),
    ("todo", "bug fix: a field lost in a save/load round trip, old files kept", 1),
    ("statkit", "missing edge case: the median of an even count", 1),
]

# The harness's prompt: the issue, and where the work is. The one-shot
# prompt has the same issue, then the files.
HARNESS_PROMPT = (
    "{issue}\n\nThe project is in your workspace. Fix this in its code, and run "
    "the `{command}` command (its unit tests) to check."
)
# The answer's form is shown by the files themselves, not by an example:
# shown `### package/module.py` as the form, the model answered with that
# path once in ten (docs/real-models.md).
ONE_SHOT_PROMPT = (
    "{issue}\n\nThe project's files, each after a line with its path:\n\n{files}\n\n"
    "Fix this. Answer with each file you change, whole, in the same form as the "
    "files above: a line `### ` and its path, then the whole new file in a fenced "
    "code block. Show only the files you change."
)
LANGUAGES = {".py": "python", ".md": "markdown", ".toml": "toml", ".json": "json"}


def read_tree(root):
    """The files below `root`, {relative path with '/': text}, sorted."""
    files = {}
    for directory, folders, names in os.walk(root):
        folders[:] = sorted(f for f in folders if f != "__pycache__")
        for name in sorted(names):
            if name.endswith(".pyc"):
                continue
            path = os.path.join(directory, name)
            with open(path, encoding="utf-8") as text:
                files[os.path.relpath(path, root).replace(os.sep, "/")] = text.read()
    return dict(sorted(files.items(), key=lambda item: file_order(item[0])))


def file_order(path):
    """README first, then the package, then the tests."""
    return (0 if path.startswith("README") else 2 if path.startswith("tests/") else 1, path)


def fenced(path, text):
    """`text` after a `### path` line, in a fenced block whose fence is longer
    than any run of backticks in it (a README's own ``` blocks)."""
    language = LANGUAGES.get(os.path.splitext(path)[1], "")
    fence = "```"
    while fence in text:
        fence += "`"
    return f"### {path}\n{fence}{language}\n{text.rstrip()}\n{fence}"


def load(name):
    base = os.path.join(REPOS, name)
    with open(os.path.join(base, "issue.md"), encoding="utf-8") as issue:
        text = issue.read().strip()
    with open(os.path.join(base, HIDDEN), encoding="utf-8") as hidden:
        hidden_text = hidden.read()
    return {
        "issue": text,
        "files": read_tree(os.path.join(base, "repo")),
        "hidden": hidden_text,
        "solution": read_tree(os.path.join(base, "solution")),
    }


def task(name, kind, changes, args):
    repo = load(name)
    if HIDDEN in repo["files"]:
        raise SystemExit(f"{name}: the hidden tests are in the workspace")
    check = {"repo": {"hidden": {HIDDEN: repo["hidden"]}, "command": HIDDEN_COMMAND}}
    files_text = "\n\n".join(fenced(path, text) for path, text in repo["files"].items())
    return {
        "id": f"repo-{name}",
        "kind": kind,
        "files_to_change": changes,
        "request": {
            "prompt": HARNESS_PROMPT.format(issue=repo["issue"], command=args.command),
            "tools": args.tools,
            "commands": [args.command],
            "workspace": {"files": repo["files"]},
            "limits": {"max_steps": args.max_steps, "timeout_ms": args.timeout_ms},
            "context": {"max_context_chars": args.max_context_chars},
        },
        "check": check,
        "one_shot": {
            "prompt": ONE_SHOT_PROMPT.format(issue=repo["issue"], files=files_text),
            "check": check,
        },
    }


def run_tests(directory, command):
    done = subprocess.run(command, cwd=directory, capture_output=True, timeout=60,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                               "PYTHONDONTWRITEBYTECODE": "1"})
    return done.returncode == 0, (done.stdout + done.stderr).decode(errors="replace")


def write_tree(directory, files):
    for path, text in files.items():
        target = os.path.join(directory, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", encoding="utf-8") as out:
            out.write(text)


def verify(name, changes):
    """Whether the task is sound: its visible and hidden tests fail on the
    repository as given and pass with the reference fix; problems, if any."""
    repo = load(name)
    problems = []
    if len(repo["solution"]) != changes:
        problems.append(f"the fix changes {len(repo['solution'])} files, not {changes}")
    if not 3 <= len(repo["files"]) <= 6:
        problems.append(f"{len(repo['files'])} files in the repository")
    visible = [sys.executable, "-m", "unittest"]
    hidden = [sys.executable] + HIDDEN_COMMAND[1:]
    for fixed in (False, True):
        with tempfile.TemporaryDirectory() as directory:
            write_tree(directory, repo["files"])
            if fixed:
                write_tree(directory, repo["solution"])
            write_tree(directory, {HIDDEN: repo["hidden"]})
            for label, command in (("visible", visible), ("hidden", hidden)):
                passed, output = run_tests(directory, command)
                if passed != fixed:
                    state = "fixed" if fixed else "as given"
                    problems.append(f"{label} tests {'fail' if fixed else 'pass'} {state}:\n{output}")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=OUT, help="where to write the tasks ('-': stdout)")
    parser.add_argument("--tools", default=",".join(TOOLS),
                        help="the harness's tools, comma-separated (default: %(default)s)")
    parser.add_argument("--command", default=COMMAND, help="the preset that runs the visible tests")
    parser.add_argument("--max-steps", type=int, default=16)
    parser.add_argument("--timeout-ms", type=int, default=1200000)
    parser.add_argument("--max-context-chars", type=int, default=16000)
    parser.add_argument("--verify", action="store_true",
                        help="check each task against its reference fix instead of writing")
    args = parser.parse_args()
    args.tools = [tool for tool in args.tools.split(",") if tool]

    if args.verify:
        failed = 0
        for name, _, changes in TASKS:
            problems = verify(name, changes)
            failed += bool(problems)
            print(f"{name:<10} {'ok' if not problems else 'BROKEN'}")
            for problem in problems:
                print("    " + problem.replace("\n", "\n    "))
        sys.exit(1 if failed else 0)

    lines = [json.dumps(task(name, kind, changes, args)) + "\n" for name, kind, changes in TASKS]
    if args.out == "-":
        sys.stdout.writelines(lines)
    else:
        with open(args.out, "w") as out:
            out.writelines(lines)
        print(f"{len(lines)} tasks written to {os.path.relpath(args.out)}", file=sys.stderr)


if __name__ == "__main__":
    main()
