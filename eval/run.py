#!/usr/bin/env python3
"""Runs a task set against an agent-runner server and scores it.

Each task of the JSONL file is a run request (without a model: the profile
given with --model is used, unless the request names a model of its own)
and a check made once the run ended:

- `{"answer_contains": TEXT}`: the run completed and its answer contains
  TEXT;
- `{"file": PATH, "python": CODE}`: the run completed, and CODE, run by
  `python3` after the workspace file PATH (a tasks's solution), exits 0 (the
  file is fetched from the server and run here, in a temporary directory,
  with a timeout: it is code a model wrote, so run this where that is
  acceptable). With `"module": NAME`, the file is saved as NAME and CODE
  imports it instead;
- `{"expect_json": DOCUMENT}`: an extraction, scored field by field (see
  `score_fields`): the run's `output` when its request has an
  `output_schema`, else its answer parsed as JSON (the whole answer, or its
  first fenced block that parses). A run that did not complete scores 0.
  The task passes when every field is right; the totals also count the
  fields right, and the runs that ended `failed` with `output_invalid`.
  `--no-schema` removes `output_schema` from every request, to compare.

- `{"repo": {"hidden": {PATH: TEXT}, "command": [...]}}`: a small
  repository (eval/build_repo_tasks.py). Whatever the run's end, every file
  of its workspace is fetched into a temporary directory, the hidden files
  are written there (over any of the same path), and `command` run there
  with a timeout must exit 0. The files the run changed are listed in the
  result (`changed`), and the run's status in its detail.

A task with `one_shot` (`{"prompt", "check": {"python": CODE}}`) is also
asked, with --one-shot, of the same model without tools: the first
```python block of its answer, followed by CODE, must exit 0. With a
`{"repo": ...}` check, the answer's files, each a line `### PATH` (or the
path alone, in backticks or bold) followed by a fenced block, are written
over the task's workspace files (a path that names no file but ends one,
such as `slug.py` for `textkit/slug.py`, is that file), and the hidden
tests run as above.

    python3 eval/run.py --server http://127.0.0.1:8080 --model qwen \\
        eval/tasks/humaneval-0-81.jsonl --one-shot --out results.jsonl
    python3 eval/run.py --model qwen eval/tasks/extraction.jsonl --no-schema
    python3 eval/run.py --model qwen eval/tasks/repos.jsonl --one-shot --out repos.jsonl

Prints a row per task and the totals; --out keeps every result as JSONL.
Standard library only.
"""

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

CHECK_TIMEOUT_S = 20


class Server:
    def __init__(self, base, token=None):
        self.base = base.rstrip("/")
        self.token = token

    def call(self, method, path, body=None, timeout=660):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("content-type", "application/json")
        if self.token:
            request.add_header("authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                raw = response.read()
                kind = response.headers.get("content-type", "")
                return response.status, (json.loads(raw) if "json" in kind else raw)
        except urllib.error.HTTPError as error:
            raw = error.read()
            try:
                return error.code, json.loads(raw)
            except ValueError:
                return error.code, raw

    def run(self, request):
        """Creates the run and waits for its end: the final run object."""
        # A server that is busy or restarting (429, 503) is waited for.
        for wait in (1, 2, 4, 8, 15, 30):
            status, run = self.call("POST", "/v1/runs", request)
            if status not in (429, 503):
                break
            time.sleep(wait)
        if status not in (200, 201):
            raise RuntimeError(f"POST /v1/runs answered {status}: {run}")
        while run["status"] in ("queued", "running"):
            time.sleep(0.5)
            _, run = self.call("GET", f"/v1/runs/{run['id']}")
        return run

    def workspace(self, run_id):
        """Every file of a run's workspace, {path: bytes}, or None and why."""
        status, listing = self.call("GET", f"/v1/runs/{run_id}/workspace")
        if status != 200 or not isinstance(listing, dict):
            return None, f"GET /workspace answered {status}"
        files = {}
        for entry in listing.get("files", []):
            path = entry["path"]
            if "__pycache__" in path.split("/") or path.endswith(".pyc"):
                continue
            content = self.file(run_id, path)
            if content is None:
                return None, f"could not download {path}"
            files[path] = content
        return files, None

    def file(self, run_id, path):
        quoted = urllib.parse.quote(path)
        status, body = self.call("GET", f"/v1/runs/{run_id}/workspace/{quoted}")
        if status != 200:
            return None
        return body if isinstance(body, bytes) else json.dumps(body).encode()


def run_python(code, files):
    """Whether `code` exits 0 in a fresh directory holding `files`, and the
    tail of its output."""
    with tempfile.TemporaryDirectory() as directory:
        for name, content in files.items():
            with open(os.path.join(directory, name), "wb") as out:
                out.write(content)
        try:
            done = subprocess.run(
                [sys.executable, "-c", code],
                cwd=directory,
                capture_output=True,
                timeout=CHECK_TIMEOUT_S,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": directory},
            )
        except subprocess.TimeoutExpired:
            return False, "timed out"
        output = (done.stdout + done.stderr).decode(errors="replace")
        return done.returncode == 0, output[-400:]


def check_run(server, run, check):
    if run["status"] != "completed":
        return False, f"ended {run['status']}: {run.get('error')}"
    if "answer_contains" in check:
        answer = run.get("answer") or ""
        found = check["answer_contains"].lower() in answer.lower()
        return found, answer[-200:]
    content = server.file(run["id"], check["file"])
    if content is None:
        return False, f"no {check['file']} in the workspace"
    if "module" in check:
        return run_python(check["python"], {check["module"]: content})
    return run_python(content.decode(errors="replace") + "\n\n" + check["python"], {})


def safe_path(path):
    """Whether `path` stays inside the directory it is written to."""
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and "\\" not in path and all(
        part not in ("", ".", "..") for part in parts
    )


def run_repo(spec, files, task):
    """Whether the hidden tests of `spec` pass on `files` (the repository
    as the model left it, {path: bytes}), and a detail: the files changed
    from the task's workspace, and the output's tail on a failure."""
    original = {}
    if task is not None:
        original = {path: text.encode() for path, text in task["request"]["workspace"]["files"].items()}
    changed = sorted(path for path in files if original.get(path) != files[path])
    with tempfile.TemporaryDirectory() as directory:
        for path, content in list(files.items()) + [
            (path, text.encode()) for path, text in spec["hidden"].items()
        ]:
            if not safe_path(path):
                continue
            target = os.path.join(directory, *path.split("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as out:
                out.write(content)
        try:
            done = subprocess.run(
                spec["command"],
                cwd=directory,
                capture_output=True,
                timeout=CHECK_TIMEOUT_S,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                     "PYTHONDONTWRITEBYTECODE": "1"},
            )
            passed = done.returncode == 0
            output = (done.stdout + done.stderr).decode(errors="replace")
        except subprocess.TimeoutExpired:
            passed, output = False, "the hidden tests timed out"
    detail = "changed: " + (", ".join(changed) or "nothing")
    if not passed:
        detail += "; hidden tests fail: " + test_failure(output)
    return {"passed": passed, "changed": changed, "detail": detail, "output": output[-3000:]}


def test_failure(output):
    """What a failing unittest run says, in a line: its verdict, the tests
    that failed, and the first exception's message."""
    lines = output.splitlines()
    verdict = [line for line in lines if line.startswith("FAILED")]
    tests = [line.split()[1] for line in lines if line.startswith(("FAIL: ", "ERROR: "))]
    error = next((line.strip() for line in lines
                  if re.match(r"\s*\w+(Error|Exception|Exit)\b", line)), "")
    parts = verdict[-1:] + ([", ".join(tests)] if tests else []) + ([error] if error else [])
    return "; ".join(parts) or " | ".join(line for line in lines[-4:] if line.strip())


# A file of a one-shot answer: a line ending with its path (`### a/b.py`,
# `a/b.py`, `**a/b.py**`, `` Here is `b.py`: ``), blank lines, then a
# fenced block; a block left unclosed runs to the end of the answer.
ANSWER_FILE = re.compile(
    r"^[^\n]*?(?P<path>[\w./-]+\.\w+)[`*]*:?[ \t]*\n(?:[ \t]*\n)*"
    r"(?P<fence>`{3,})[^\n]*\n(?P<body>.*?)(?:^(?P=fence)[ \t]*$|\Z)",
    re.M | re.S,
)


def answer_files(answer, known):
    """The files of a one-shot answer, {path: text}: each path as written,
    or the one file of `known` whose path ends with it; a path that is
    neither is taken only when it looks like a new Python file."""
    files = {}
    for match in ANSWER_FILE.finditer(answer):
        path = match.group("path")
        if path.startswith("./"):
            path = path[2:]
        if path not in known:
            endings = [name for name in known if name.endswith("/" + path)]
            if len(endings) == 1:
                path = endings[0]
            elif not path.endswith(".py"):
                continue
        body = match.group("body")
        files[path] = body if body.endswith("\n") or not body else body + "\n"
    return files


CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


def check_one_shot(run, check, task=None):
    if "repo" in check:
        answer = run.get("answer") or ""
        if not answer:
            return {"passed": False, "changed": [],
                    "detail": f"ended {run['status']}: {run.get('error')}, no answer"}
        original = task["request"]["workspace"]["files"]
        written = answer_files(answer, original)
        files = {path: text.encode() for path, text in original.items()}
        files.update((path, text.encode()) for path, text in written.items())
        result = run_repo(check["repo"], files, task)
        result["answer"] = answer
        if not written:
            result["detail"] = "no file in the answer; " + result["detail"]
        return result
    if run["status"] != "completed":
        return False, f"ended {run['status']}: {run.get('error')}"
    answer = run.get("answer") or ""
    blocks = CODE_BLOCK.findall(answer)
    code = blocks[0] if blocks else answer
    return run_python(code + "\n\n" + check["python"], {})


JSON_BLOCK = re.compile(r"```[ \t]*(?:json)?[ \t]*\n(.*?)```", re.S | re.I)


def answer_json(answer):
    """The JSON document of an answer given without a schema: the whole
    answer, or else the first fenced block (```json or a bare ```) that
    parses, text around it allowed. None when there is neither."""
    for text in [answer] + JSON_BLOCK.findall(answer):
        try:
            return json.loads(text)
        except ValueError:
            continue
    return None


def normalised(value):
    """`value` as fields are compared: strings trimmed, their inner runs of
    whitespace made one space, case-folded; numbers (integers or not) as
    floats; arrays as multisets (sorted, so order does not count but
    duplicates do); objects key by key. Booleans and null stay themselves,
    and a type never equals another: "12.5" is not 12.5, 1 is not true."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return " ".join(value.split()).casefold()
    if isinstance(value, list):
        return sorted((normalised(item) for item in value), key=canonical)
    if isinstance(value, dict):
        return {key: normalised(item) for key, item in value.items()}
    return value


def canonical(value):
    return json.dumps(value, sort_keys=True)


def same(expected, got):
    return canonical(normalised(expected)) == canonical(normalised(got))


def score_fields(expected, document):
    """Each field of the object `expected` compared with the same field of
    `document` (see `normalised`): `{field: {"right", "expected", "got"}}`,
    without "got" for a field the document lacks. An array is one field,
    right only when all its items are. Fields the document has beyond the
    expected ones do not count."""
    fields = {}
    for name, want in expected.items():
        if isinstance(document, dict) and name in document:
            got = document[name]
            fields[name] = {"right": same(want, got), "expected": want, "got": got}
        else:
            fields[name] = {"right": False, "expected": want}
    return fields


def extracted(run, schema):
    """The document a run extracted (its `output` when it had a schema,
    else its answer parsed), or None, and what went wrong."""
    if run["status"] != "completed":
        return None, f"ended {run['status']}: {run.get('error')}"
    if schema:
        if "output" not in run:
            return None, "the run has no output (a server without output_schema?)"
        return run["output"], None
    document = answer_json(run.get("answer") or "")
    if document is None:
        return None, "the answer is not JSON: " + (run.get("answer") or "")[:120]
    return document, None


def check_extraction(run, expected, schema):
    """The fields of a run's extraction compared with `expected`: a result's
    extraction part."""
    document, problem = extracted(run, schema)
    fields = score_fields(expected, document)
    right = sum(field["right"] for field in fields.values())
    wrong = [name for name, field in fields.items() if not field["right"]]
    if problem is None and not isinstance(document, dict):
        problem = "the answer is not a JSON object"
    detail = f"{right}/{len(fields)} fields"
    if problem:
        detail += "; " + problem
    elif wrong:
        detail += "; wrong: " + ", ".join(wrong)
    return {
        "passed": right == len(fields),
        "schema": schema,
        "fields_right": right,
        "fields": len(fields),
        "score": round(right / len(fields), 3) if fields else 0,
        "output_invalid": run["status"] == "failed"
        and str(run.get("error") or "").startswith("output_invalid"),
        "document": document,
        "field_results": fields,
        "detail": detail,
    }


def with_model(request, model, ablate=()):
    """`request` with the model profile (unless it names its own), less
    what `ablate` turns off: `instructions` (the server's default ones),
    `edit_file`, `search` (tools)."""
    request = dict(request)
    if "model" not in request and model:
        request["model"] = model
    if "instructions" in ablate:
        request["instructions"] = ""
    if "tools" in request:
        request["tools"] = [tool for tool in request["tools"] if tool not in ablate]
    return request


def attempt(server, task, model, one_shot, ablate=(), no_schema=False, attempts=1):
    began = time.monotonic()
    extraction = None
    repo = None
    tried = None
    if one_shot:
        spec = task["one_shot"]
        request = with_model(
            {"prompt": spec["prompt"], "tools": [], "limits": {"max_steps": 1, "timeout_ms": 600000}},
            model,
        )
        if "model" in spec:
            request["model"] = spec["model"]
        run = server.run(request)
        checked = check_one_shot(run, spec["check"], task)
        if isinstance(checked, dict):
            repo = checked
            passed, detail = repo.pop("passed"), repo.pop("detail")
        else:
            passed, detail = checked
    else:
        request = with_model(task["request"], model, ablate)
        if no_schema:
            request.pop("output_schema", None)
        if attempts > 1:
            request["attempts"] = {"n": attempts, "until": "first_pass"}
        run = server.run(request)
        if "expect_json" in task["check"]:
            extraction = check_extraction(run, task["check"]["expect_json"], "output_schema" in request)
            passed, detail = extraction.pop("passed"), extraction.pop("detail")
        elif "repo" in task["check"]:
            files, problem = server.workspace(run["id"])
            if files is None:
                passed, detail = False, problem
            else:
                repo = run_repo(task["check"]["repo"], files, task)
                passed = repo.pop("passed")
                detail = f"run {run['status']}; " + repo.pop("detail")
        else:
            passed, detail = check_run(server, run, task["check"])
        if attempts > 1 and "file" in task["check"]:
            tried = score_attempts(server, run, task["check"])
    result = {
        "task": task["id"],
        "mode": "one_shot" if one_shot else harness_mode(attempts),
        "passed": passed,
        "status": run["status"],
        "steps": run.get("steps"),
        "tool_calls": run.get("tool_calls"),
        "seconds": round(time.monotonic() - began, 1),
        "run_id": run["id"],
        "detail": detail,
    }
    if tried is not None:
        result["attempts"] = tried
    if extraction is not None:
        result.update(extraction)
    if repo is not None:
        result.update(repo)
    return result


def score_attempts(server, run, check):
    """Each attempt of a run of attempts, scored on its own workspace by the
    task's check: [{attempt, status, checks_passed, passed, seconds}]. The
    first attempt keeps the profile's temperature: it is the plain run (SPEC
    section 27), so it gives the one-attempt figures too, when it ran to its
    end (attempts one at a time, as with `max_concurrent = 1`). An attempt
    superseded before its end (or cancelled before it started) is not
    scored (`passed` null)."""
    scored = []
    for entry in run.get("attempts") or []:
        status, child = server.call("GET", f"/v1/runs/{entry['run_id']}")
        if status != 200:
            raise RuntimeError(f"GET attempt {entry['attempt']} answered {status}: {child}")
        superseded = child["status"] == "aborted" and (
            "superseded" in str(child.get("error")) or not child.get("started_at"))
        passed = None if superseded else check_run(server, child, check)[0]
        scored.append({
            "attempt": entry["attempt"],
            "status": child["status"],
            "checks_passed": entry.get("checks_passed"),
            "passed": passed,
            "seconds": run_seconds(child),
        })
    return scored


def run_seconds(run):
    """A run's wall time from its start to its end, or None."""
    try:
        start = datetime.datetime.fromisoformat(run["started_at"].replace("Z", "+00:00"))
        end = datetime.datetime.fromisoformat(run["finished_at"].replace("Z", "+00:00"))
    except (KeyError, AttributeError, TypeError, ValueError):
        return None
    return round((end - start).total_seconds(), 1)


def harness_mode(attempts):
    """The name of a harness run's mode: `harness`, or `attempts-N`."""
    return "harness" if attempts <= 1 else f"attempts-{attempts}"


def extraction_totals(totals, result):
    """Adds an extraction's result to `totals`, kept apart with a schema and
    without."""
    key = "with schema" if result["schema"] else "without schema"
    total = totals.setdefault(key, {"fields_right": 0, "fields": 0, "tasks": 0, "full": 0,
                                    "output_invalid": 0, "seconds": 0.0})
    total["fields_right"] += result["fields_right"]
    total["fields"] += result["fields"]
    total["tasks"] += 1
    total["full"] += result["passed"]
    total["output_invalid"] += result["output_invalid"]
    total["seconds"] += result["seconds"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tasks", nargs="+", help="JSONL task files")
    parser.add_argument("--server", default="http://127.0.0.1:8080")
    parser.add_argument("--model", help="the model profile the runs use")
    parser.add_argument("--token", default=os.environ.get("AGENT_RUNNER_TOKEN"))
    parser.add_argument("--one-shot", action="store_true", help="also ask each task in one shot")
    parser.add_argument("--no-harness", action="store_true", help="only the one-shot baseline")
    parser.add_argument("--repeat", type=int, default=1, help="tries of each task")
    parser.add_argument(
        "--attempts",
        type=int,
        default=1,
        help="each harness run tried this many times, its checks choosing (first_pass)",
    )
    parser.add_argument("--only", help="a regular expression the task ids must match")
    parser.add_argument("--out", help="where to write every result, as JSONL")
    parser.add_argument(
        "--ablate",
        action="append",
        default=[],
        choices=["instructions", "edit_file", "search"],
        help="turn one aid off (repeatable): the default instructions, or a tool",
    )
    parser.add_argument(
        "--no-schema",
        action="store_true",
        help="remove output_schema from every request (extractions are then read from the answer)",
    )
    args = parser.parse_args()

    server = Server(args.server, args.token)
    tasks = []
    for path in args.tasks:
        with open(path) as lines:
            tasks += [json.loads(line) for line in lines if line.strip()]
    if args.only:
        tasks = [task for task in tasks if re.search(args.only, task["id"])]
    out = open(args.out, "a") if args.out else None
    totals = {}
    extractions = {}
    print(f"{'task':<18} {'mode':<9} {'result':<6} {'steps':>5} {'seconds':>8}  detail")
    for task in tasks:
        modes = [] if args.no_harness else [False]
        if (args.one_shot or args.no_harness) and "one_shot" in task:
            modes.append(True)
        for one_shot in modes:
            for _ in range(args.repeat):
                try:
                    result = attempt(server, task, args.model, one_shot, args.ablate,
                                     args.no_schema, args.attempts)
                except Exception as error:  # a task's failure is its own
                    mode = "one_shot" if one_shot else harness_mode(args.attempts)
                    result = {"task": task["id"], "mode": mode,
                              "passed": False, "status": "error", "steps": None,
                              "seconds": 0, "detail": str(error)}
                    if not one_shot and "expect_json" in task["check"]:
                        expected = task["check"]["expect_json"]
                        result.update(
                            schema="output_schema" in task["request"] and not args.no_schema,
                            fields_right=0, fields=len(expected), score=0,
                            output_invalid=False, document=None,
                            field_results=score_fields(expected, None),
                        )
                if "fields" in result:
                    extraction_totals(extractions, result)
                passed, seconds = totals.get(result["mode"], (0, 0)), result["seconds"]
                count, took = totals.get(result["mode"] + "_n", (0, 0.0))
                totals[result["mode"]] = (passed[0] + result["passed"], 0)
                totals[result["mode"] + "_n"] = (count + 1, took + seconds)
                detail = " ".join(str(result["detail"]).split())[:110]
                if result.get("attempts"):
                    # Per attempt: its status, its checks (c) and the task's check (t).
                    mark = {True: "y", False: "n", None: "-"}
                    detail = " ".join(
                        f"#{a['attempt']} {a['status']} c={mark[a['checks_passed']]} "
                        f"t={mark[a['passed']]} {a['seconds'] if a['seconds'] is not None else '-'} s;"
                        for a in result["attempts"]
                    ) + " " + detail
                print(
                    f"{result['task']:<18} {result['mode']:<9} "
                    f"{'pass' if result['passed'] else 'FAIL':<6} "
                    f"{result['steps'] if result['steps'] is not None else '-':>5} "
                    f"{result['seconds']:>8}  {detail}",
                    flush=True,
                )
                if out:
                    out.write(json.dumps(result) + "\n")
                    out.flush()
    for mode in ("harness", harness_mode(args.attempts), "one_shot"):
        if mode + "_n" in totals and (mode != "harness" or args.attempts <= 1):
            count, took = totals[mode + "_n"]
            print(
                f"{mode}: {totals[mode][0]}/{count} passed, "
                f"{took / count:.1f} s per task on average"
            )
    for key, total in extractions.items():
        print(
            f"extraction, {key}: {total['fields_right']}/{total['fields']} fields right, "
            f"{total['full']}/{total['tasks']} tasks fully right, "
            f"{total['output_invalid']} ended output_invalid, "
            f"{total['seconds'] / total['tasks']:.1f} s per task on average"
        )


if __name__ == "__main__":
    main()
