#!/usr/bin/env bash
# Installs test/apis/node_modules (json-server, json-server-auth, MailDev)
# from package-lock.json with `npm ci`, only when it is missing or was
# installed from another lock file, taking packages from npm's cache first.
set -euo pipefail
cd "$(dirname "$0")"
want=$(sha256sum package-lock.json package.json | sha256sum | cut -d' ' -f1)
stamp=node_modules/.toolgate-lock-sha256
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "e2e-apis: npm ci in test/apis" >&2
npm ci --prefer-offline --no-audit --no-fund --loglevel=error >&2
echo "$want" >"$stamp"
