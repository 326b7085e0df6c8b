#!/usr/bin/env bash
# Runs every native fuzz target for a while: FUZZTIME per target (default
# 10s for make test; make fuzz passes minutes). A crasher fails the run and
# stays in testdata/fuzz as a regression test.
set -euo pipefail
fuzztime="${FUZZTIME:-10s}"
status=0
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  targets=$(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u || true)
  for t in $targets; do
    echo "fuzz: $pkg $t ($fuzztime)"
    if ! go test -run '^$' -fuzz "^${t}\$" -fuzztime "$fuzztime" "$pkg" >/tmp/fuzz-$t.log 2>&1; then
      cat /tmp/fuzz-$t.log
      status=1
    fi
  done
done
exit $status
