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
  imports it instead.

A task with `one_shot` (`{"prompt", "check": {"python": CODE}}`) is also
asked, with --one-shot, of the same model without tools: the first
```python block of its answer, followed by CODE, must exit 0.

    python3 eval/run.py --server http://127.0.0.1:8080 --model qwen \\
        eval/tasks/humaneval-0-81.jsonl --one-shot --out results.jsonl

Prints a row per task and the totals; --out keeps every result as JSONL.
Standard library only.
"""

import argparse
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


CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


def check_one_shot(run, check):
    if run["status"] != "completed":
        return False, f"ended {run['status']}: {run.get('error')}"
    answer = run.get("answer") or ""
    blocks = CODE_BLOCK.findall(answer)
    code = blocks[0] if blocks else answer
    return run_python(code + "\n\n" + check["python"], {})


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


def attempt(server, task, model, one_shot, ablate=()):
    began = time.monotonic()
    if one_shot:
        spec = task["one_shot"]
        request = with_model(
            {"prompt": spec["prompt"], "tools": [], "limits": {"max_steps": 1, "timeout_ms": 600000}},
            model,
        )
        if "model" in spec:
            request["model"] = spec["model"]
        run = server.run(request)
        passed, detail = check_one_shot(run, spec["check"])
    else:
        run = server.run(with_model(task["request"], model, ablate))
        passed, detail = check_run(server, run, task["check"])
    return {
        "task": task["id"],
        "mode": "one_shot" if one_shot else "harness",
        "passed": passed,
        "status": run["status"],
        "steps": run.get("steps"),
        "tool_calls": run.get("tool_calls"),
        "seconds": round(time.monotonic() - began, 1),
        "run_id": run["id"],
        "detail": detail,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tasks", nargs="+", help="JSONL task files")
    parser.add_argument("--server", default="http://127.0.0.1:8080")
    parser.add_argument("--model", help="the model profile the runs use")
    parser.add_argument("--token", default=os.environ.get("AGENT_RUNNER_TOKEN"))
    parser.add_argument("--one-shot", action="store_true", help="also ask each task in one shot")
    parser.add_argument("--no-harness", action="store_true", help="only the one-shot baseline")
    parser.add_argument("--repeat", type=int, default=1, help="tries of each task")
    parser.add_argument("--only", help="a regular expression the task ids must match")
    parser.add_argument("--out", help="where to write every result, as JSONL")
    parser.add_argument(
        "--ablate",
        action="append",
        default=[],
        choices=["instructions", "edit_file", "search"],
        help="turn one aid off (repeatable): the default instructions, or a tool",
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
    print(f"{'task':<18} {'mode':<9} {'result':<6} {'steps':>5} {'seconds':>8}  detail")
    for task in tasks:
        modes = [] if args.no_harness else [False]
        if (args.one_shot or args.no_harness) and "one_shot" in task:
            modes.append(True)
        for one_shot in modes:
            for _ in range(args.repeat):
                try:
                    result = attempt(server, task, args.model, one_shot, args.ablate)
                except Exception as error:  # a task's failure is its own
                    result = {"task": task["id"], "mode": "one_shot" if one_shot else "harness",
                              "passed": False, "status": "error", "steps": None,
                              "seconds": 0, "detail": str(error)}
                passed, seconds = totals.get(result["mode"], (0, 0)), result["seconds"]
                count, took = totals.get(result["mode"] + "_n", (0, 0.0))
                totals[result["mode"]] = (passed[0] + result["passed"], 0)
                totals[result["mode"] + "_n"] = (count + 1, took + seconds)
                detail = " ".join(str(result["detail"]).split())[:60]
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
    for mode in ("harness", "one_shot"):
        if mode + "_n" in totals:
            count, took = totals[mode + "_n"]
            print(
                f"{mode}: {totals[mode][0]}/{count} passed, "
                f"{took / count:.1f} s per task on average"
            )


if __name__ == "__main__":
    main()
