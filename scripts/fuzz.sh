#!/usr/bin/env bash
# Runs every native fuzz target for a while: FUZZTIME per target (default
# 10s for make test; make fuzz passes minutes). A crasher fails the run and
# stays in testdata/fuzz as a regression test.
#
# Go 1.26's fuzz coordinator can end a run with a bare "context deadline
# exceeded" when -fuzztime expires while a worker is mid-input, more often
# on a loaded machine (go.dev/issue/75804, fixed in Go 1.27). A real finding
# always writes a failing input, so a failure without one is run once more,
# and if the race hits again the seed corpus is replayed deterministically:
# only a written input or a failing replay fails the run.
set -euo pipefail
fuzztime="${FUZZTIME:-10s}"
status=0

# fuzz_once PKG TARGET LOG: one run; exit status of go test.
fuzz_once() {
  go test -run '^$' -fuzz "^${2}\$" -fuzztime "$fuzztime" "$1" >"$3" 2>&1
}

# deadline_race LOG: the run failed only on the coordinator's deadline race.
deadline_race() {
  grep -q 'context deadline exceeded' "$1" && ! grep -q 'Failing input written to' "$1"
}

for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  targets=$(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u || true)
  for t in $targets; do
    echo "fuzz: $pkg $t ($fuzztime)"
    log=/tmp/fuzz-$t.log
    if fuzz_once "$pkg" "$t" "$log"; then
      continue
    fi
    if deadline_race "$log"; then
      echo "fuzz: $t ended on the fuzztime deadline race without a finding; running it again"
      if fuzz_once "$pkg" "$t" "$log"; then
        continue
      fi
      if deadline_race "$log" && go test -count=1 -run "^${t}\$" "$pkg" >"$log.replay" 2>&1; then
        echo "fuzz: $t hit the deadline race twice; its corpus replays clean"
        continue
      fi
    fi
    cat "$log"
    status=1
  done
done
exit $status
