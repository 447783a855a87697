#!/usr/bin/env bash
# Validates the Kubernetes manifests under deploy/ against Kubernetes' own
# schemas, strictly (an unknown field is an error), with PyPI's
# kubernetes-validate (pinned; installed into a cache folder the first time).
# That the ConfigMap's configuration is one the server takes is tested by
# `cargo test` (tests/api/deploy.rs).
set -euo pipefail
cd "$(dirname "$0")/../.."

VERSION=1.37.0
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/agent-runner-ci"
VENV="$CACHE/kubernetes-validate-$VERSION"
if [ ! -x "$VENV/bin/kubernetes-validate" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$VERSION"
fi
"$VENV/bin/kubernetes-validate" --strict --quiet deploy/kubernetes/*.yaml
echo "deploy/kubernetes: valid"
