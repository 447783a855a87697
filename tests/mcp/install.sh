#!/usr/bin/env bash
# Installs the MCP reference server the tests run against
# (@modelcontextprotocol/server-everything, every package pinned by
# everything/package-lock.json, no install scripts run) into a cache folder,
# once, and prints the folder. Safe to run concurrently and again.
set -euo pipefail
cd "$(dirname "$0")/everything"

LOCK_HASH="$(sha256sum package-lock.json | cut -c1-16)"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/agent-runner-ci"
DIR="$CACHE/mcp-everything-$LOCK_HASH"
ENTRY="$DIR/node_modules/@modelcontextprotocol/server-everything/dist/index.js"

if [ -f "$ENTRY" ]; then
  echo "$DIR"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  apt-get update -qq >&2 && apt-get install -y -qq nodejs npm >&2
fi
mkdir -p "$CACHE"
exec 9>"$CACHE/.mcp-everything.lock"
flock 9
if [ ! -f "$ENTRY" ]; then
  TMP="$(mktemp -d "$CACHE/.mcp-everything.XXXXXX")"
  cp package.json package-lock.json "$TMP/"
  npm ci --ignore-scripts --silent --no-audit --no-fund --prefix "$TMP" >&2
  rm -rf "$DIR"
  mv "$TMP" "$DIR"
fi
echo "$DIR"
