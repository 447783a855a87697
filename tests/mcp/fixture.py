"""Small MCP servers for the failure cases the reference server has no
switch for. Standard library only; run by Debian's /usr/bin/python3.

    fixture.py dies      writes a cause to stderr and exits 3 at once
    fixture.py hangs     reads its stdin and never answers
    fixture.py calls     a stdio server with two tools: `record` (appends
                         its `n` to calls.log in its working directory, the
                         run's workspace) and `wait` (never answers); each
                         notifications/cancelled it gets is appended to
                         cancelled.log
    fixture.py http TOKEN
                         a streamable HTTP server on a free port (its
                         number the first line on stdout, once it listens)
                         that answers only requests carrying
                         `Authorization: Bearer TOKEN` (a 401 echoes what
                         it got); each session's close (DELETE) is appended
                         to sessions.log, each POST's traceparent header to
                         traceparents.log, in its working directory
"""

import http.server
import json
import sys

TOOLS = [
    {
        "name": "record",
        "description": "Records a number.",
        "inputSchema": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
            "additionalProperties": False,
        },
    },
    {
        "name": "wait",
        "description": "Never answers.",
        "inputSchema": {"type": "object", "properties": {}},
    },
]


def append(path, line):
    with open(path, "a") as file:
        file.write(line + "\n")


def answer(message):
    """The response to one JSON-RPC message, or None (a notification, or a
    call that is never answered)."""
    method = message.get("method")
    if "id" not in message:
        if method == "notifications/cancelled":
            append("cancelled.log", str(message["params"].get("requestId")))
        return None
    result = None
    if method == "initialize":
        result = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "fixture", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        name = message["params"]["name"]
        if name == "wait":
            return None
        n = message["params"]["arguments"]["n"]
        append("calls.log", str(n))
        result = {"content": [{"type": "text", "text": "recorded %d" % n}]}
    else:
        return {"jsonrpc": "2.0", "id": message["id"],
                "error": {"code": -32601, "message": "no method " + str(method)}}
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


def stdio():
    for line in sys.stdin:
        reply = answer(json.loads(line))
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


def serve_http(token):
    class Handler(http.server.BaseHTTPRequestHandler):
        def authorized(self):
            given = self.headers.get("Authorization") or ""
            if given == "Bearer " + token:
                return True
            # What it was sent, echoed: a client must not show it on.
            data = ("not authorized: got %r" % given).encode()
            self.send_response(401)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return False

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if not self.authorized():
                return
            append("traceparents.log", str(self.headers.get("traceparent")))
            reply = answer(json.loads(body))
            if reply is None:
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Mcp-Session-Id", "fixture-session")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.authorized():
                self.send_response(405)
                self.send_header("Content-Length", "0")
                self.end_headers()

        def do_DELETE(self):
            if self.authorized():
                append("sessions.log", "closed " + str(self.headers.get("Mcp-Session-Id")))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


def main():
    mode = sys.argv[1]
    if mode == "dies":
        sys.stderr.write("fixture: starting\n")
        sys.stderr.write("fixture: cannot start: FIXTURE_DATABASE is not set\n")
        sys.exit(3)
    elif mode == "hangs":
        for _ in sys.stdin:
            pass
    elif mode == "calls":
        stdio()
    elif mode == "http":
        serve_http(sys.argv[2])


main()
