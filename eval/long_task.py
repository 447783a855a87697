#!/usr/bin/env python3
"""A long task for context compaction (docs/real-models.md): follow a chain
of N files (each names the next), then report a fact that needs the first
and the last: no file can be skipped, and the first is long gone from the
context when the last is read.

Runs it against a server started with eval/server.toml (its `qwen-proxy`
profile), whose model calls go through a small forwarding proxy here that
measures what each call sends: the characters of its `messages` array.
Three ways: the whole context, a quarter of it with masking alone, and a
quarter of it with compaction.

    python3 eval/long_task.py [--files 12] [--out eval-data/long-task.json]

The model server must listen on 127.0.0.1:18081; the proxy listens on
127.0.0.1:18090.
"""

import argparse
import http.server
import json
import threading
import time
import urllib.request

SERVER = "http://127.0.0.1:8080"
MODEL = "http://127.0.0.1:18081"

CALLS = []  # (label, chars of messages, has tools)
LABEL = {"now": ""}


class Proxy(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        try:
            request = json.loads(body)
            CALLS.append(
                (
                    LABEL["now"],
                    len(json.dumps(request.get("messages", []), ensure_ascii=False)),
                    "tools" in request,
                )
            )
        except ValueError:
            pass
        forward = urllib.request.Request(
            MODEL + self.path, data=body, headers={"content-type": "application/json"}
        )
        try:
            with urllib.request.urlopen(forward, timeout=600) as answer:
                data, status = answer.read(), answer.status
        except urllib.error.HTTPError as error:
            data, status = error.read(), error.code
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def code(n):
    return (n * 7) % 10 + 1


WORDS = ["amber", "birch", "cedar", "delta", "ember", "fjord", "grove", "heron", "iris",
         "juniper", "kestrel", "larch", "maple", "nectar", "onyx", "pine", "quartz", "raven",
         "sable", "tundra"]


def name(n):
    """The file of link n (1-based): start.txt, then shuffled words."""
    return "start.txt" if n == 1 else f"{WORDS[(n * 7) % len(WORDS)]}.txt"


def workspace(files):
    filler = "Nothing in this line matters for the task. " * 4
    out = {}
    for n in range(1, files + 1):
        after = (f"The next file to read is {name(n + 1)}." if n < files
                 else "This is the last file of the chain.")
        out[name(n)] = f"{filler}\nThe code of this file is {code(n)}. {after}\n{filler}\n"
    return out


def call(method, path, body=None):
    request = urllib.request.Request(
        SERVER + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=7200) as answer:
        return json.loads(answer.read())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=12)
    parser.add_argument("--whole", type=int, default=16000)
    parser.add_argument("--only", default="")
    parser.add_argument("--out", default="eval-data/long-task.json")
    args = parser.parse_args()
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 18090), Proxy)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    expected = code(1) + code(args.files)
    prompt = (
        "Read start.txt with read_file. Each file names the next file to read: read them "
        "one by one until the file that says it is the last. Then tell me the sum of the code "
        "of start.txt and the code of the last file."
    )
    quarter = args.whole // 4
    ways = [
        ("whole", {"max_context_chars": args.whole}),
        ("masking", {"max_context_chars": quarter}),
        ("compaction", {"max_context_chars": quarter, "compaction": {"at": 0.8}}),
    ]
    results = []
    for label, context in ways:
        if args.only and label != args.only:
            continue
        LABEL["now"] = label
        began = time.time()
        run = call(
            "POST",
            "/v1/runs?wait=true",
            {
                "prompt": prompt,
                "model": "qwen-proxy",
                "tools": ["read_file"],
                "workspace": {"files": workspace(args.files)},
                "limits": {"max_steps": args.files + 8, "max_tool_calls": args.files + 8,
                           "timeout_ms": 3_600_000},
                "context": context,
            },
        )
        seconds = time.time() - began
        messages = call("GET", f"/v1/runs/{run['id']}/messages")["messages"]
        read = [m for m in messages if m["role"] == "assistant" for c in m.get("tool_calls", [])]
        sent = [chars for (l, chars, tools) in CALLS if l == label and tools]
        # Summary requests (and any call asked to answer now) carry no tools.
        summaries = [chars for (l, chars, tools) in CALLS if l == label and not tools]
        answer = run.get("answer") or ""
        result = {
            "way": label,
            "status": run["status"],
            "answer": answer,
            "correct": str(expected) in answer,
            "reads": len(read),
            "steps": run["steps"],
            "seconds": round(seconds, 1),
            "chars_per_step": sent,
            "max_chars": max(sent or [0]),
            "mean_chars": round(sum(sent) / len(sent)) if sent else 0,
            "calls_without_tools": len(summaries),
            "chars_without_tools": summaries,
            "usage": run["usage"],
        }
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "chars_per_step"}), flush=True)
    with open(args.out, "w") as out:
        json.dump({"expected": expected, "files": args.files, "results": results}, out, indent=2)


if __name__ == "__main__":
    main()
