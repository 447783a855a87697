#!/usr/bin/env bash
# A real PostgreSQL for the tests: `server.sh start DIR` initialises a
# cluster in DIR (once), starts it on a free loopback port as the `postgres`
# user when run as root, and prints its URL; `server.sh stop DIR` stops it.
# Installs PostgreSQL's server with apt-get where it is missing.
set -euo pipefail

find_bin() {
  for dir in /usr/lib/postgresql/*/bin; do
    if [ -x "$dir/initdb" ]; then echo "$dir"; return 0; fi
  done
  return 1
}

BIN="$(find_bin || true)"
if [ -z "$BIN" ]; then
  bash "$(dirname "$0")/../apt/install.sh" '/usr/lib/postgresql/*/bin/initdb' postgresql
  BIN="$(find_bin)"
fi

ACTION="$1"
DIR="$2"
as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$ACTION" in
  start)
    mkdir -p "$DIR"
    if [ "$(id -u)" = 0 ]; then chown postgres "$DIR"; fi
    if [ ! -f "$DIR/data/PG_VERSION" ]; then
      as_owner "$BIN/initdb" -D "$DIR/data" -U postgres -A trust --no-sync -E UTF8 >/dev/null
    fi
    PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    # Durability is not what the tests measure: no fsync, a small footprint.
    as_owner "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 30 \
      -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=400 -c shared_buffers=64MB" \
      start >/dev/null
    echo "postgres://postgres@127.0.0.1:$PORT/postgres"
    ;;
  stop)
    if [ -f "$DIR/data/postmaster.pid" ]; then
      as_owner "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null || true
    fi
    ;;
  *)
    echo "usage: server.sh start|stop DIR" >&2
    exit 2
    ;;
esac
