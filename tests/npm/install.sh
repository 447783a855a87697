#!/usr/bin/env bash
# `install.sh DIR NAME ENTRY`: installs the npm packages that DIR's
# package-lock.json pins (no install scripts run) into a cache folder named
# NAME and the lockfile's hash, once, and prints the folder; ENTRY (a path in
# it) tells that an install is complete. Installs Node and npm with apt-get
# where they are missing. Safe to run concurrently and again.
set -euo pipefail
DIR="$(cd "$1" && pwd)"
NAME="$2"
ENTRY="$3"

LOCK_HASH="$(sha256sum "$DIR/package-lock.json" | cut -c1-16)"
# Commands, MCP servers among them, run as an unprivileged user when the
# server is root (tests run as root on CI), so a root's cache is one every
# user may read, not one under /root.
if [ -n "${XDG_CACHE_HOME:-}" ]; then
  CACHE="$XDG_CACHE_HOME/agent-runner-ci"
elif [ "$(id -u)" = 0 ]; then
  CACHE="/var/cache/agent-runner-ci"
else
  CACHE="$HOME/.cache/agent-runner-ci"
fi
TARGET="$CACHE/$NAME-$LOCK_HASH"

if [ -e "$TARGET/$ENTRY" ]; then
  echo "$TARGET"
  exit 0
fi
bash "$(dirname "$0")/../apt/install.sh" npm nodejs npm
mkdir -p "$CACHE"
exec 9>"$CACHE/.$NAME.lock"
flock 9
if [ ! -e "$TARGET/$ENTRY" ]; then
  TMP="$(mktemp -d "$CACHE/.$NAME.XXXXXX")"
  cp "$DIR/package.json" "$DIR/package-lock.json" "$TMP/"
  npm ci --ignore-scripts --silent --no-audit --no-fund --prefix "$TMP" >&2
  chmod 755 "$TMP"
  rm -rf "$TARGET"
  mv "$TMP" "$TARGET"
fi
echo "$TARGET"
