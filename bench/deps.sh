#!/usr/bin/env bash
# Installs what bench/run.sh needs beyond Go: nginx (the reference reverse
# proxy), wrk (the load generator), redis-server (the idempotency runs'
# shared store), taskset (util-linux, for pinning) and curl (readiness and
# answer checks).
# Debian packages only; needs root or sudo. Safe to run again: it installs
# nothing that is there. make test never calls it.
set -euo pipefail
# shellcheck source=scripts/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/apt.sh"

need=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx)
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v taskset >/dev/null 2>&1 || need+=(util-linux)
command -v curl >/dev/null 2>&1 || need+=(curl)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
echo "bench deps: installing ${need[*]}" >&2
apt_install "${need[@]}"
