#!/usr/bin/env python3
"""A task a parent must delegate (docs/real-models.md, sub-agents): three
services, each described by a long notes file that names the port it
listens on somewhere in the middle. The parent has no file tools: it must
call `delegate` once a service, each child reading one file with
`read_file` and reporting the port, and combine the three. The same task
without delegation reads the three files itself.

Reports, for each way: whether the answer names the three ports, the wall
time, the parent's own tokens and `usage_total`, and what the parent's
context held: its transcript's characters and the largest prompt it sent
(`model_end` input tokens).

    python3 eval/delegate_task.py [--model qwen] [--repeat 1] [--out eval-data/delegate.json]

Against a server started with eval/server.toml on 127.0.0.1:8080.
"""

import argparse
import json
import time
import urllib.request

SERVER = "http://127.0.0.1:8080"
SERVICES = {"billing": 8101, "search": 8202, "mail": 8303}
FILLER = [
    "The team reviews the dashboards every Monday and files issues for anything unusual.",
    "Deployments go out behind a feature flag and are rolled back by flipping it off.",
    "Logs are kept for thirty days; metrics for a year, downsampled after a week.",
    "On-call engineers rotate weekly; the handbook lists who to page for each alert.",
    "Configuration lives in the repository and is reviewed like any other change.",
    "The service exposes health checks that the load balancer polls every few seconds.",
]


def notes(name, port):
    lines = [f"# The {name} service", ""]
    for i in range(24):
        lines.append(FILLER[i % len(FILLER)])
        if i == 12:
            lines.append(f"The {name} service listens on port {port}.")
    return "\n".join(lines) + "\n"


def files():
    return {f"services/{name}/NOTES.md": notes(name, port) for name, port in SERVICES.items()}


def request(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        SERVER + path, data=data, method=method, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=1800) as answer:
        return json.loads(answer.read())


def events(run_id):
    req = urllib.request.Request(SERVER + f"/v1/runs/{run_id}/events")
    out = []
    with urllib.request.urlopen(req, timeout=1800) as answer:
        for raw in answer:
            line = raw.decode().strip()
            if line.startswith("data:"):
                out.append(json.loads(line[5:]))
    return out


def body(model, delegated):
    names = ", ".join(f"services/{name}" for name in SERVICES)
    if delegated:
        prompt = (
            f"Find the port each of three services listens on: {names}. "
            "Call the delegate tool three times in one response, once for each service, with "
            "agent \"reader\" and a prompt like \"Read services/NAME/NOTES.md and report the "
            "port the NAME service listens on.\" Then answer with the three ports, one line "
            "per service, as NAME: PORT."
        )
        return {
            "prompt": prompt,
            "model": model,
            "tools": [],
            "instructions": "You coordinate sub-agents through the delegate tool. You cannot read files yourself.",
            "workspace": {"files": files()},
            "limits": {"max_steps": 6, "timeout_ms": 1200000},
            "subagents": {
                "reader": {
                    "description": "reads one file and reports the port it names",
                    "model": model,
                    "tools": ["read_file"],
                    "limits": {"max_steps": 4},
                }
            },
        }
    prompt = (
        f"Find the port each of three services listens on: {names}. Read each "
        "services/NAME/NOTES.md with read_file. Then answer with the three ports, one line per "
        "service, as NAME: PORT."
    )
    return {
        "prompt": prompt,
        "model": model,
        "tools": ["read_file"],
        "workspace": {"files": files()},
        "limits": {"max_steps": 8, "timeout_ms": 1200000},
    }


def measure(model, delegated):
    began = time.monotonic()
    run = request("POST", "/v1/runs?wait=true", body(model, delegated))
    wall = time.monotonic() - began
    messages = request("GET", f"/v1/runs/{run['id']}/messages")["messages"]
    chars = sum(len(json.dumps(m, ensure_ascii=False)) for m in messages)
    prompts = [
        e["usage"]["input_tokens"]
        for e in events(run["id"])
        if e.get("type") == "model_end" and e.get("usage")
    ]
    children = request("GET", f"/v1/runs?parent_run_id={run['id']}")["runs"]
    answer = run.get("answer") or ""
    return {
        "way": "delegated" if delegated else "alone",
        "status": run["status"],
        "ports_found": sum(str(port) in answer for port in SERVICES.values()),
        "answer": answer,
        "wall_s": round(wall, 1),
        "children": len(children),
        "children_completed": sum(c["status"] == "completed" for c in children),
        "parent_input_tokens": run["usage"]["input_tokens"],
        "total_input_tokens": (run.get("usage_total") or run["usage"])["input_tokens"],
        "parent_transcript_chars": chars,
        "parent_largest_prompt_tokens": max(prompts, default=0),
        "parent_model_calls": len(prompts),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", default="eval-data/delegate.json")
    args = parser.parse_args()
    results = []
    for _ in range(args.repeat):
        for delegated in (True, False):
            result = measure(args.model, delegated)
            print(json.dumps(result), flush=True)
            results.append(result)
    with open(args.out, "w") as out:
        json.dump(results, out, indent=1)


if __name__ == "__main__":
    main()
