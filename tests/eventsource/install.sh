#!/usr/bin/env bash
# Installs npm's `eventsource` (pinned by package-lock.json, no install
# scripts run), the real EventSource client the API tests drive, into a cache
# folder, once, and prints the folder. Safe to run concurrently and again.
set -euo pipefail
cd "$(dirname "$0")"
exec bash ../npm/install.sh . eventsource node_modules/eventsource/package.json
