# agent-runner in a container.
#
#   docker build -t agent-runner .
#   docker run -p 8080:8080 -v agent-runner-data:/data \
#     -e AGENT_RUNNER_AUTH__TOKENS='[{tenant="default", token_sha256="<hex>"}]' \
#     agent-runner
#
# The image listens on 0.0.0.0:8080, and the server refuses to bind a
# non-loopback address unless bearer tokens are configured: give it at least
# one token, as above (the hex is the SHA-256 of the token, for example
# `printf %s "$TOKEN" | sha256sum`), or mount a config file with
# [[auth.tokens]] and add `--config FILE` after the image name (arguments
# there are appended to `agent-runner serve`). Without a token the container
# exits at once with an error that says so. Overriding
# AGENT_RUNNER_SERVER__BIND=127.0.0.1:8080 also starts it without a token,
# but then nothing outside the container can reach it.
#
# Runs, transcripts and workspaces live under /data: keep it on a volume.
# Any other key can be set the same way, AGENT_RUNNER_SECTION__KEY (model
# profiles, command presets, limits); see docs/configuration.md.

# The images the stages start from. CI builds this file with stand-ins made
# from Debian's packages and the machine's own toolchain (tests/image/run.sh),
# where base images cannot be pulled.
ARG BUILD_IMAGE=rust:1.95-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

# ---- build ------------------------------------------------------------------
FROM ${BUILD_IMAGE} AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY migrations ./migrations
COPY benches ./benches
COPY console ./console
COPY openapi.json ./

# The crates downloaded and the build's output are kept in cache mounts
# (BuildKit's, or buildah's), not in a layer: a rebuild after a change to
# the code compiles the service alone, and the image's layers stay small.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin agent-runner \
 && cp target/release/agent-runner /usr/local/bin/agent-runner

# ---- runtime ----------------------------------------------------------------
FROM ${RUNTIME_IMAGE}

# ca-certificates: model providers are reached over HTTPS.
# curl: the health check below.
# tini: an init for PID 1. Command presets start processes, and descendants
# they leave behind are reparented to PID 1 to be reaped; the server is not
# an init, tini is.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl tini \
 && rm -rf /var/lib/apt/lists/*

# /workspace: where a command sees its run's workspace (a mount point in
# its own user and mount namespace, where the runtime allows one; the
# server, not root, cannot make it).
RUN useradd --system --uid 10001 --user-group --home-dir /data \
      --shell /usr/sbin/nologin agent-runner \
 && mkdir -p /data /workspace \
 && chown agent-runner:agent-runner /data

COPY --from=build /usr/local/bin/agent-runner /usr/local/bin/agent-runner

ENV AGENT_RUNNER_SERVER__BIND=0.0.0.0:8080 \
    AGENT_RUNNER_STORAGE__DATABASE_URL=sqlite:///data/agent-runner.db \
    AGENT_RUNNER_STORAGE__WORKSPACES_DIR=/data/workspaces

USER agent-runner
WORKDIR /data
VOLUME /data
EXPOSE 8080

# Liveness through the API itself, on the port bound above (move both together).
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
  CMD curl -fsS -o /dev/null http://127.0.0.1:8080/healthz || exit 1

# SIGTERM (docker stop) lets running runs finish within
# runs.shutdown_grace_ms (10 s by default) and stores everything before the
# process exits: give `docker stop` a longer timeout than that grace.
ENTRYPOINT ["/usr/bin/tini", "--", "agent-runner", "serve"]
