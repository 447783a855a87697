#!/usr/bin/env bash
# Runs the Python client's tests against the real server. The tools come from
# a virtual environment of pinned versions (requirements-test.txt), made once
# in a cache folder and shared by runs (safe to run concurrently); the client
# itself is installed afresh for each run, into a folder of that run's own.
#
#   AGENT_RUNNER_BIN  the server binary (default: target/debug/agent-runner)
#   PYTHON            the interpreter (default: python3)
# Arguments are passed to pytest.
set -euo pipefail
if [ -n "${AGENT_RUNNER_BIN:-}" ]; then
  AGENT_RUNNER_BIN="$(realpath -m "$AGENT_RUNNER_BIN")"
fi
cd "$(dirname "$0")/../.."

PYTHON="${PYTHON:-python3}"
REQUIREMENTS=clients/python/requirements-test.txt
KEY="$( { cat "$REQUIREMENTS"; "$PYTHON" -c 'import sys; print(sys.version)'; } \
  | sha256sum | cut -c1-16)"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/agent-runner-ci"
VENV="$CACHE/python-client-$KEY"

if [ ! -e "$VENV/.complete" ]; then
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.python-client.lock"
  flock 9
  if [ ! -e "$VENV/.complete" ]; then
    # Made where it stays (its scripts name its path); `.complete` comes
    # last, so that a broken install is made again.
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps \
      -r "$REQUIREMENTS" >&2 || { rm -rf "$VENV"; exit 1; }
    touch "$VENV/.complete"
  fi
  exec 9>&-
fi

SITE="$(mktemp -d)"
trap 'rm -rf "$SITE"' EXIT
"$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps \
  --no-build-isolation --no-cache-dir --target "$SITE" ./clients/python

export AGENT_RUNNER_BIN="${AGENT_RUNNER_BIN:-target/debug/agent-runner}"
PYTHONPATH="$SITE" PYTHONDONTWRITEBYTECODE=1 \
  "$VENV/bin/python" -m pytest -q -p no:cacheprovider clients/python/tests "$@"
