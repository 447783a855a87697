#!/usr/bin/env bash
# Installs the MCP reference server the tests run against
# (@modelcontextprotocol/server-everything, every package pinned by
# everything/package-lock.json, no install scripts run) into a cache folder,
# once, and prints the folder. Safe to run concurrently and again.
set -euo pipefail
cd "$(dirname "$0")"
exec bash ../npm/install.sh everything mcp-everything \
  node_modules/@modelcontextprotocol/server-everything/dist/index.js
