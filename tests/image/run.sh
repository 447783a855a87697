#!/usr/bin/env bash
# Builds the top-level Dockerfile for real and runs the image as it ships: its
# entrypoint, as its own user, with its own environment. Then checks that it
# serves /healthz, that a run completes, that a sandboxed preset runs there
# (a chroot gives it no namespaces: with [sandbox] allow_weaker)
# and reports what it enforces (and what it cannot reach: /etc/shadow, the
# server's /data), and that the data lands in /data.
#
# Base images cannot be pulled here, so the stages start from stand-ins:
# Debian bookworm made by mmdebstrap from Debian's packages (the runtime
# stage), and that plus this machine's Rust toolchain and a C compiler (the
# build stage). buildah builds without a daemon (`--isolation chroot
# --network host`) and runs the image the same way. Everything is kept in a
# container store of its own under the cache folder, so a second run reuses
# the stand-ins, and the Dockerfile's cache mounts keep the crates and the
# build's output: it compiles only what changed. The image tested is removed
# afterwards.
set -euo pipefail
cd "$(dirname "$0")/../.."

bash tests/apt/install.sh buildah buildah
bash tests/apt/install.sh mmdebstrap mmdebstrap

CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/agent-runner-ci"
STORE="$CACHE/containers"
mkdir -p "$STORE"
exec 8>"$CACHE/.image.lock"
flock 8
b() { buildah --root "$STORE/storage" --runroot "$STORE/run" "$@"; }
have_image() { b inspect --type image "$1" >/dev/null 2>&1; }

# Whatever this run leaves, its exit removes: the containers it made, the
# image it tested, its temporary files, and the server (stop, below).
c=""
LOG=""
SCRATCH="$(mktemp -d)"
IMAGE=localhost/agent-runner-ci/agent-runner:test
cleanup() {
  stop
  if [ -n "$c" ]; then b rm "$c" >/dev/null 2>&1 || true; fi
  b rmi "$IMAGE" >/dev/null 2>&1 || true
  b rmi --prune >/dev/null 2>&1 || true
  rm -rf "$SCRATCH"
}
stop() { :; }
trap cleanup EXIT

# The runtime stage's base: Debian bookworm, minimal, with what the
# Dockerfile installs already in (its apt-get then finds them there).
BASE=localhost/agent-runner-ci/bookworm:1
if ! have_image "$BASE"; then
  TAR="$SCRATCH/bookworm.tar"
  mmdebstrap --quiet --variant=minbase --include=ca-certificates,curl,tini \
    bookworm "$TAR" http://deb.debian.org/debian
  c="$(b from scratch)"
  b add "$c" "$TAR" / >/dev/null
  b commit --quiet "$c" "$BASE" >/dev/null
  b rm "$c" >/dev/null
  c=""
  rm -f "$TAR"
fi

# The build stage's: that, a C compiler, this machine's toolchain (its
# documentation left out) and this machine's trust store (crates.io may be
# reached through a proxy of its own). The numbers after the names change
# when what the stand-ins hold does.
SYSROOT="$(rustc --print sysroot)"
RUST_VERSION="$(rustc --version | cut -d' ' -f2)"
RUST=localhost/agent-runner-ci/rust:"$RUST_VERSION"-1
if ! have_image "$RUST"; then
  c="$(b from --pull-never "$BASE")"
  b run --isolation chroot --network host "$c" -- sh -c \
    'apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null'
  b copy "$c" /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt >/dev/null
  for part in bin lib libexec etc; do
    if [ -d "$SYSROOT/$part" ]; then b copy "$c" "$SYSROOT/$part" "/usr/local/rust/$part" >/dev/null; fi
  done
  b config --env PATH=/usr/local/cargo/bin:/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env CARGO_HOME=/usr/local/cargo "$c"
  b commit --quiet "$c" "$RUST" >/dev/null
  b rm "$c" >/dev/null
  c=""
fi

started=$(date +%s)
b bud --quiet --format docker --isolation chroot --network host --pull-never \
  --build-arg BUILD_IMAGE="$RUST" --build-arg RUNTIME_IMAGE="$BASE" \
  -t "$IMAGE" -f Dockerfile . >/dev/null
echo "image: built in $(( $(date +%s) - started )) s, $(b images --format '{{.Size}}' "$IMAGE")"
# Docker's format, whose health check an engine runs (OCI's has none).
HEALTHCHECK="$(b inspect --type image --format '{{.Docker.Config.Healthcheck.Test}}' "$IMAGE")"
case "$HEALTHCHECK" in
  */healthz*) ;;
  *) echo "image: no health check on /healthz: $HEALTHCHECK" >&2; exit 1 ;;
esac

# Run it as it ships: the image's entrypoint, user, working directory and
# environment, and one token (outside loopback the server requires one). A
# free port instead of 8080, which the machine may use.
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
TOKEN="image-test-token"
HASH="$(printf %s "$TOKEN" | sha256sum | cut -d' ' -f1)"
field() { b inspect --type image --format "$1" "$IMAGE"; }
USER_NAME="$(field '{{.OCIv1.Config.User}}')"
WORKDIR="$(field '{{.OCIv1.Config.WorkingDir}}')"
mapfile -t ENTRY < <(field '{{range .OCIv1.Config.Entrypoint}}{{println .}}{{end}}' | sed '/^$/d')
mapfile -t ENVS < <(field '{{range .OCIv1.Config.Env}}{{println .}}{{end}}' | sed '/^$/d')
ENV_ARGS=()
for pair in "${ENVS[@]}"; do ENV_ARGS+=(--env "$pair"); done
c="$(b from --pull-never "$IMAGE")"
LOG="$SCRATCH/server.log"
# The server runs in a process group of its own. buildah passes no signal
# on (a SIGTERM to it kills the container), so the stop is the server's own
# SIGTERM, through tini as a container engine's stop gives it; the group is killed
# if it outlasts its grace.
stop() {
  [ -n "${SERVER:-}" ] || return 0
  pkill -TERM -g "$SERVER" -x tini 2>/dev/null || true
  for _ in $(seq 1 200); do
    kill -0 -- "-$SERVER" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL -- "-$SERVER" 2>/dev/null || true
  wait "$SERVER" 2>/dev/null || true
  SERVER=
}
setsid buildah --root "$STORE/storage" --runroot "$STORE/run" run --isolation chroot --network host --user "$USER_NAME" --workingdir "$WORKDIR" \
  "${ENV_ARGS[@]}" \
  --env AGENT_RUNNER_SERVER__BIND="0.0.0.0:$PORT" \
  --env AGENT_RUNNER_AUTH__TOKENS="[{tenant = \"image-test\", token_sha256 = \"$HASH\"}]" \
  --env AGENT_RUNNER_SANDBOX__ALLOW_WEAKER=true \
  --env AGENT_RUNNER_COMMANDS__PROBE__PROGRAM=/bin/sh \
  --env AGENT_RUNNER_COMMANDS__PROBE__ARGS='["-c", "id -u; cat /etc/shadow >/dev/null 2>&1 && echo shadow-read || echo shadow-denied; ls /data >/dev/null 2>&1 && echo data-listed || echo data-denied; echo made > made.txt"]' \
  "$c" -- "${ENTRY[@]}" > "$LOG" 2>&1 8>&- &
SERVER=$!

URL="http://127.0.0.1:$PORT"
for _ in $(seq 1 100); do
  if curl -fsS -o /dev/null "$URL/healthz" 2>/dev/null; then break; fi
  if ! kill -0 "$SERVER" 2>/dev/null; then echo "image: the server exited:" >&2; cat "$LOG" >&2; exit 1; fi
  sleep 0.1
done
curl -fsS -o /dev/null "$URL/healthz" || { echo "image: no /healthz:" >&2; cat "$LOG" >&2; exit 1; }
grep -q "sandbox enforced" "$LOG" || { echo "image: the sandbox is not enforced:" >&2; cat "$LOG" >&2; exit 1; }
# Which layout commands get here (a chroot refuses user namespaces, so
# their real paths), said at start either way.
grep -q "their workspace at" "$LOG" || { echo "image: the log names no layout:" >&2; cat "$LOG" >&2; exit 1; }
grep -o "their workspace at [^;]*" "$LOG" | head -1
# A chroot gives commands no namespaces: runs are not fully kept apart, so
# presets run only because the operator accepts it (allow_weaker), and
# /readyz says so.
READY="$(curl -fsS "$URL/readyz")"
python3 - "$READY" <<'PY'
import json, sys
sandbox = json.loads(sys.argv[1])["sandbox"]
assert sandbox["presets"] == "enabled_weaker" and sandbox["weaker"], sandbox
print(f"image: presets run weaker here: {sandbox['weaker']}")
PY

RUN="$(curl -fsS -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' \
  "$URL/v1/runs?wait=true" -d '{
    "prompt": "probe",
    "commands": ["probe"],
    "model": {"scripted": [
      {"content": "", "tool_calls": [{"id": "p", "name": "run_command", "arguments": {"command": "probe"}}]},
      {"content": "probed"}
    ]}
  }')"
ID="$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); assert r["status"]=="completed", r; print(r["id"])' "$RUN")"
MESSAGES="$(curl -fsS -H "authorization: Bearer $TOKEN" "$URL/v1/runs/$ID/messages")"
python3 - "$MESSAGES" <<'PY'
import json, sys
messages = json.loads(sys.argv[1])["messages"]
result = json.loads(next(m for m in messages if m["role"] == "tool")["content"])
assert result["exit_code"] == 0, result
assert result["sandbox"]["filesystem"] == "landlock", result
assert result["sandbox"]["network"] == "blocked", result
lines = result["stdout"].split()
assert lines[0] != "0", f"the command ran as root: {result}"
assert "shadow-denied" in lines and "data-denied" in lines, result
print(f"image: a sandboxed command ran as uid {lines[0]}: {result['sandbox']}")
PY

# A graceful stop, as `docker stop` or Kubernetes gives it.
stop
grep -q "stopped" "$LOG" || { echo "image: the server did not stop cleanly:" >&2; cat "$LOG" >&2; exit 1; }
# The image's VOLUME /data: buildah keeps it beside the container, as an
# engine keeps an anonymous volume.
VOLUMES="$STORE/storage/overlay-containers/$(b inspect --format '{{.ContainerID}}' "$c")/userdata/buildah-volumes"
DATA="$(dirname "$(find "$VOLUMES" -maxdepth 2 -name agent-runner.db | head -n 1)")"
test -s "$DATA/agent-runner.db" || { echo "image: no database in /data" >&2; exit 1; }
test "$(cat "$DATA/workspaces/$ID/made.txt")" = made || { echo "image: the workspace is not in /data" >&2; exit 1; }
echo "image: serves, runs, sandboxes, and keeps its data in /data"
