#!/usr/bin/env bash
# Installs what bench/run.sh needs beyond Go: nginx (the reference reverse
# proxy), wrk (the load generator), redis-server (the idempotency runs'
# shared store), taskset (util-linux, for pinning) and curl (readiness and
# answer checks).
# Debian packages only; needs root or sudo. Safe to run again: it installs
# nothing that is there. make test never calls it.
set -euo pipefail

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
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# The Debian packages start a system nginx on port 80 and a system Redis on
# 6379; the benchmark starts its own, so stop those (they are not ours to
# leave running).
for svc in nginx redis-server; do
  if [[ " ${need[*]} " == *" $svc "* ]]; then
    $sudo systemctl stop "$svc" >/dev/null 2>&1 || $sudo service "$svc" stop >/dev/null 2>&1 || true
  fi
done
