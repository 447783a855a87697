#!/usr/bin/env bash
# Installs Arize Phoenix (pinned), the trace receiver the trace tests send
# to and read back from, into a virtual environment in a cache folder, once,
# and prints the path of its `phoenix` command. Safe to run concurrently and
# again.
set -euo pipefail

VERSION=20.26.1
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/agent-runner-ci"
TARGET="$CACHE/phoenix-$VERSION"

if [ -x "$TARGET/bin/phoenix" ]; then
  echo "$TARGET/bin/phoenix"
  exit 0
fi
mkdir -p "$CACHE"
exec 9>"$CACHE/.phoenix.lock"
flock 9
if [ ! -x "$TARGET/bin/phoenix" ]; then
  # Made where it stays (a virtual environment's scripts name its path);
  # `bin/phoenix` appears last, so a broken install is made again.
  rm -rf "$TARGET"
  python3 -m venv "$TARGET"
  "$TARGET/bin/pip" install --quiet --disable-pip-version-check "arize-phoenix==$VERSION" >&2 \
    || { rm -rf "$TARGET"; exit 1; }
fi
echo "$TARGET/bin/phoenix"
