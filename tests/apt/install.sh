#!/usr/bin/env bash
# `install.sh COMMAND PACKAGE...`: installs Debian's PACKAGEs with apt-get
# unless COMMAND (a name on PATH, or a path, which may be a glob) is there
# already. Tests that need
# a package ask at once (every browser test does), and concurrent apt-gets
# fail on dpkg's lock: so one install runs at a time, under a lock of its
# own, and each asker looks again once it holds it. Safe to run concurrently
# and again; quick when the command is there.
set -euo pipefail
CHECK="$1"
shift
have() {
  if [[ "$CHECK" == */* ]]; then
    compgen -G "$CHECK" >/dev/null
  else
    command -v "$CHECK" >/dev/null 2>&1
  fi
}
if have; then
  exit 0
fi
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/agent-runner-ci"
mkdir -p "$CACHE"
exec 9>"$CACHE/.apt.lock"
flock 9
if ! have; then
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2
fi
