#!/usr/bin/env bash
# Installs what the browser tests drive: Debian's chromium (with apt-get,
# where it is missing; a browser download does not work everywhere) and npm's
# playwright-core (pinned by package-lock.json, no install scripts run, into
# a cache folder, once). Prints the folder of playwright-core. Safe to run
# concurrently and again.
set -euo pipefail
cd "$(dirname "$0")"
bash ../apt/install.sh /usr/bin/chromium chromium
exec bash ../npm/install.sh . playwright node_modules/playwright-core/package.json
