#!/usr/bin/env bash
# Runs every native fuzz target for a while: FUZZTIME per target (default
# 10s for make test; make fuzz and make full pass minutes). A crasher fails
# the run and stays in testdata/fuzz as a regression test.
#
# Targets run FUZZJOBS at a time (default 2), each with FUZZPARALLEL fuzz
# workers (default 1): on two cores, two one-worker targets side by side
# halve the wall time of running them one after another with a worker per
# core, for the same fuzzing time per target. Each target prints one line,
# "fuzz: PKG TARGET (FUZZTIME)", when it starts (make test counts them).
#
# Go 1.26's fuzz coordinator can end a run with a bare "context deadline
# exceeded" when -fuzztime expires while a worker is mid-input, more often
# on a loaded machine (go.dev/issue/75804, fixed in Go 1.27). A real finding
# always writes a failing input, so a failure without one is run once more,
# and if the race hits again the seed corpus is replayed deterministically:
# only a written input or a failing replay fails the run.
set -euo pipefail
fuzztime="${FUZZTIME:-10s}"
jobs="${FUZZJOBS:-2}"
parallel="${FUZZPARALLEL:-1}"
logs=$(mktemp -d "${TMPDIR:-/tmp}/toolgate-fuzz.XXXXXX")
trap 'rm -rf "$logs"' EXIT

# fuzz_once PKG TARGET LOG: one run; exit status of go test.
fuzz_once() {
  go test -run '^$' -fuzz "^${2}\$" -fuzztime "$fuzztime" -parallel "$parallel" "$1" >"$3" 2>&1
}

# deadline_race LOG: the run failed only on the coordinator's deadline race.
deadline_race() {
  grep -q 'context deadline exceeded' "$1" && ! grep -q 'Failing input written to' "$1"
}

# fuzz_target PKG TARGET: runs one target to its verdict; on failure it
# prints the log and leaves TARGET.failed in the log directory.
fuzz_target() {
  local pkg=$1 t=$2 log="$logs/${1//\//_}.$2.log"
  if fuzz_once "$pkg" "$t" "$log"; then
    return 0
  fi
  if deadline_race "$log"; then
    echo "fuzz: $t ended on the fuzztime deadline race without a finding; running it again"
    if fuzz_once "$pkg" "$t" "$log"; then
      return 0
    fi
    if deadline_race "$log" && go test -count=1 -run "^${t}\$" "$pkg" >"$log.replay" 2>&1; then
      echo "fuzz: $t hit the deadline race twice; its corpus replays clean"
      return 0
    fi
  fi
  cat "$log"
  touch "$log.failed"
}

for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  targets=$(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u || true)
  for t in $targets; do
    # Wait for a free slot.
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
      wait -n || true
    done
    echo "fuzz: $pkg $t ($fuzztime)"
    fuzz_target "$pkg" "$t" &
  done
done
wait

failed=$(find "$logs" -name '*.failed' | wc -l)
if [ "$failed" -gt 0 ]; then
  echo "fuzz: $failed target(s) failed"
  exit 1
fi
