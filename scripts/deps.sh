#!/usr/bin/env bash
# Installs the server binaries the tests start themselves (redis-server,
# prometheus and promtool, node, and chromium for the console's browser
# test) when they are missing. Debian packages only;
# needs root or sudo. Safe to run again: it installs nothing that is there.
set -euo pipefail
# shellcheck source=scripts/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

need=()
# redis-server also runs the tests' Cluster nodes (--cluster-enabled) and
# Sentinels (--sentinel): no redis-sentinel or redis-tools package needed.
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v node >/dev/null 2>&1 || need+=(nodejs npm)
# Headless Chromium drives the admin console's browser test (console/).
command -v chromium >/dev/null 2>&1 || need+=(chromium)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
# De-duplicate.
mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
echo "deps: installing ${need[*]}" >&2
apt_install "${need[@]}"
