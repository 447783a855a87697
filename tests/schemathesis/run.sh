#!/usr/bin/env bash
# Runs Schemathesis against openapi.yaml and the real server, bounded in
# examples and time, with a fixed seed so that a failure is reproducible.
# Installs Schemathesis (pinned) into a cache folder the first time.
set -euo pipefail
cd "$(dirname "$0")/../.."

VERSION=4.32.5
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/agent-runner-ci"
VENV="$CACHE/schemathesis-$VERSION"
if [ ! -x "$VENV/bin/st" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$VERSION"
fi

cargo build --locked --quiet --bin agent-runner
DATA="$(mktemp -d)"
LOG="$DATA/server.log"
cleanup() {
  if [ -n "${SERVER:-}" ]; then kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; fi
  rm -rf "$DATA"
}
trap cleanup EXIT
AGENT_RUNNER_STORAGE__DATABASE_URL="sqlite://$DATA/runs.db" \
AGENT_RUNNER_STORAGE__WORKSPACES_DIR="$DATA/workspaces" \
  target/debug/agent-runner serve --config tests/schemathesis/server.toml \
  > "$DATA/stdout" 2> "$LOG" &
SERVER=$!
for _ in $(seq 1 100); do
  if grep -q "listening on" "$DATA/stdout" 2>/dev/null; then break; fi
  sleep 0.1
done
URL="$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$DATA/stdout" | head -n 1)"
if [ -z "$URL" ]; then
  echo "schemathesis: the server did not start:" >&2
  cat "$LOG" >&2
  exit 1
fi

# From the data folder, so that Schemathesis's own cache stays out of the tree.
# One worker: with two, Hypothesis describing strategies in two threads at
# once trips CPython 3.11's "AST constructor recursion depth mismatch" (its
# AST conversion kept the depth in interpreter-wide state, python/cpython
# gh-106905), a fault of the interpreter that failed CI now and then. The
# whole run takes about 15 s either way.
ROOT="$PWD"
cd "$DATA"
SCHEMATHESIS_HOOKS=hooks PYTHONPATH="$ROOT/tests/schemathesis" \
  timeout 300 "$VENV/bin/st" --config-file "$ROOT/tests/schemathesis/schemathesis.toml" \
  run "$ROOT/openapi.yaml" \
  --url "$URL" \
  -H "Authorization: Bearer schemathesis-token" \
  --max-examples 30 \
  --seed 20261201 \
  --workers 1
