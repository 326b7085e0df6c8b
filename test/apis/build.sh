#!/usr/bin/env bash
# Builds the Go servers make e2e-apis runs toolgate in front of, into
# bin/apis: Mailpit and PocketBase from this module's go.mod (Mailpit as a
# tool, PocketBase embedded in ./pocketbase as its documentation shows),
# and Gotify's server v2.9.1 from its module zip, which leaves out the web
# UI Gotify embeds: placeholder files stand in for it. Everything comes
# through the Go module proxy. A stamp of this script and the module files
# skips the build while they have not changed, so a second run builds
# nothing; the Go build cache makes a rebuild after a change quick.
set -euo pipefail
cd "$(dirname "$0")"
out="$(cd ../.. && pwd)/bin/apis"
gotify_version=v2.9.1
mkdir -p "$out"
want=$(cat build.sh go.mod go.sum pocketbase/main.go | sha256sum | cut -d' ' -f1)
stamp="$out/.built-sha256"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$out/mailpit" ] && [ -x "$out/pocketbase" ] && [ -x "$out/gotify" ]; then
  echo "e2e-apis: servers in bin/apis are up to date" >&2
  exit 0
fi
start=$(date +%s)
echo "e2e-apis: building Mailpit and PocketBase into bin/apis" >&2
CGO_ENABLED=0 go build -trimpath -o "$out/" github.com/axllent/mailpit ./pocketbase

echo "e2e-apis: building Gotify $gotify_version into bin/apis (cgo: its SQLite driver)" >&2
src=$(go mod download -json "github.com/gotify/server/v2@$gotify_version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ -z "$src" ]; then
  echo "e2e-apis: the Go module proxy did not give github.com/gotify/server/v2@$gotify_version" >&2
  exit 1
fi
work="$out/src/gotify-$gotify_version"
rm -rf "$work"
mkdir -p "$out/src"
cp -r "$src" "$work"
chmod -R u+w "$work"
# ui/serve.go embeds build/*: index.html (with %CONFIG%), manifest.json and
# static/. The API does not need them.
mkdir -p "$work/ui/build/static"
printf '<!doctype html><title>Gotify</title><p>Placeholder UI of the toolgate end-to-end tests.</p><script>window.config = %%CONFIG%%;</script>\n' >"$work/ui/build/index.html"
printf '{"name": "Gotify"}\n' >"$work/ui/build/manifest.json"
printf 'placeholder\n' >"$work/ui/build/static/placeholder.txt"
(cd "$work" && CGO_ENABLED=1 GOFLAGS=-mod=mod go build -trimpath -o "$out/gotify" .)
echo "$want" >"$stamp"
echo "e2e-apis: built in $(( $(date +%s) - start ))s" >&2
