# shellcheck shell=bash
# apt_install PKG... installs Debian packages (root or sudo), without the
# recommended ones, and stops the services the packages start: the tests and
# the benchmark start their own servers, and a system one left running is
# not theirs. Sourced by scripts/deps.sh and bench/deps.sh.
apt_install() {
  [ $# -gt 0 ] || return 0
  local sudo="" svc
  if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
  for svc in nginx redis-server prometheus; do
    if [[ " $* " == *" $svc "* ]]; then
      $sudo systemctl stop "$svc" >/dev/null 2>&1 || $sudo service "$svc" stop >/dev/null 2>&1 || true
    fi
  done
}
