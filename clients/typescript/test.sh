#!/usr/bin/env bash
# The TypeScript client's suite: installs its pinned devDependencies once
# into a cache folder (tests/npm/install.sh), builds it, checks its types
# against openapi.yaml, and runs its tests against a real server: the binary
# AGENT_RUNNER_BIN names, by default target/debug/agent-runner of the
# repository.
set -euo pipefail
# A relative AGENT_RUNNER_BIN is relative to where the script was started.
if [ -n "${AGENT_RUNNER_BIN:-}" ]; then
  AGENT_RUNNER_BIN="$(realpath -m "$AGENT_RUNNER_BIN")"
fi
cd "$(dirname "$0")"
REPO="$(cd ../.. && pwd)"

# A node_modules of its own (after `npm ci`) is used as it is; otherwise a
# link to the cache folder stands in for it.
if [ ! -d node_modules ] || [ -L node_modules ]; then
  CACHE="$(bash "$REPO/tests/npm/install.sh" . ts-client node_modules/typescript/package.json)"
  ln -sfn "$CACHE/node_modules" node_modules
fi

export AGENT_RUNNER_BIN="${AGENT_RUNNER_BIN:-$REPO/target/debug/agent-runner}"
if [ ! -x "$AGENT_RUNNER_BIN" ]; then
  echo "test.sh: no server binary at $AGENT_RUNNER_BIN: build it with \`cargo build\`, or set AGENT_RUNNER_BIN" >&2
  exit 1
fi

rm -rf dist
npm run --silent build
npm run --silent check:types
npm run --silent test
