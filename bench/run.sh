#!/usr/bin/env bash
# bench/run.sh: the side-by-side load benchmark (issues 8 and 19).
#
# Builds toolgate, the bundled backend (bench/backend: the search API and
# the notification API on one port), a tuned httputil.ReverseProxy
# (bench/reverseproxy) and the in-flight load generator (bench/inflight)
# into bin/bench, starts them and nginx on loopback, and loads each hop
# with wrk, interleaved over several rounds. Sections (BENCH_SECTIONS),
# each one table:
#
# main         every variant at each of BENCH_CONNS:
#   direct                the backend itself, GET /api/search?q=go&limit=5
#   nginx                 nginx with upstream keep-alive, same GET
#   httputil              the tuned Go reverse proxy (pooled 32 KiB copy
#                         buffers, keep-alive pool, no compression), same GET
#   httputil-nopool       the same without the BufferPool: issue 8's
#                         baseline; not run unless named in BENCH_VARIANTS
#   toolgate              POST /v1/tools/search_articles {"q":"go","limit":5}
#   toolgate-transparent  toolgate with server.transparent: true, same GET as
#                         the others: the apples-to-apples hop
#   toolgate-mcp          POST /mcp, a JSON-RPC tools/call of the same search
#                         (the MCP front is stateless: no initialize needed)
#   toolgate-mcp-2026     the same call of MCP revision 2026-07-28, as the
#                         TypeScript 2.x client sends it: MCP-Protocol-Version,
#                         Mcp-Method and Mcp-Name headers, and the protocol
#                         version, client info and capabilities in _meta
#   toolgate-info         the POST again, with -log-level info (one log line
#                         per call, written to a file)
# size         httputil and toolgate (POST) at BENCH_CURVE_CONNS against
#              answers of 1 KiB, 64 KiB and 1 MiB (bench/backend -size)
# tools        toolgate (POST) with 10 and 1,000 tools in the policy (the
#              example's two plus generated copies of search_articles)
# conns        httputil and toolgate (POST) at 1, 32 and 1,000 connections
# idempotency  send_notification through toolgate at BENCH_IDEM_CONNS: a
#              forwarded call (a new Idempotency-Key per request) and a
#              replay (one key), with the memory store and with Redis
#              (a redis-server of its own)
# startup      toolgate started with 10, 1,000 and 5,000 tools
#              (BENCH_STARTUP_TOOLS; copies of search_articles, in files of
#              1,000, as one file may expand to 200,000 values): time from
#              exec to /readyz, peak RSS while loading, RSS once ready; then
#              a reload of the 1,000-tool policy while wrk calls it
# inflight     bench/inflight puts BENCH_INFLIGHT calls in flight at once
#              through each hop to a backend that answers after 200 ms
#              (bench/backend -delay): memory per in-flight call, errors,
#              latency
#
# Curves, idempotency and in-flight runs use processes of their own, so the
# resident memory reported (VmHWM, the peak) belongs to that one load.
#
# toolgate runs the example policy's search tool unchanged (validation, CEL
# rules, zh message templates): that is its whole job, so that is what is
# measured. The server side (backend, Redis and the proxy under test) is
# pinned to one CPU and the load generator to another. Each run records
# requests/s, p50 and p99, and the CPU the proxy process used per request
# (utime+stime from /proc/<pid>/stat). The tables hold medians over rounds,
# the latency each hop adds over direct and the ratios to nginx and to the
# tuned httputil.
#
# Settings (environment):
#   BENCH_SECTIONS="main size tools conns idempotency startup inflight"
#   BENCH_ROUNDS=3          rounds; each round runs every variant once per
#                           connection count, in a rotated order
#   BENCH_DURATION=10s      length of one wrk run
#   BENCH_WARMUP=2s         one warm-up run per variant before round 1
#   BENCH_CONNS="1 32"      connection counts of the main table
#   BENCH_VARIANTS="direct nginx httputil toolgate toolgate-transparent toolgate-mcp toolgate-mcp-2026 toolgate-info"
#   BENCH_CURVE_CONNS=32    connections of the size and tools curves
#   BENCH_CURVE_ROUNDS      rounds of the curves and idempotency (BENCH_ROUNDS)
#   BENCH_IDEM_CONNS=1      connections of the idempotency runs
#   BENCH_STARTUP_TOOLS="10 1000 5000"  tool counts of the startup section
#   BENCH_INFLIGHT=10000    calls in flight; lowered to what the open-file
#                           limit allows (a proxied call holds two sockets)
#   BENCH_MAX_OTHER=25      each run waits (up to BENCH_QUIET_WAIT seconds)
#   BENCH_QUIET_WAIT=30     for a second in which other work (a shared
#   BENCH_RETRIES=2         machine) used at most this share (%) of the
#                           server CPU; a run during which more went
#                           elsewhere, or in which requests failed, is run
#                           again, up to BENCH_RETRIES times
#   BENCH_OUT=dir           also keep the tables, raw runs and logs there
#                           (default bench/out/<timestamp>, git-ignored)
#   BENCH_BIN=dir           where the binaries are built (default bin/bench,
#                           git-ignored; make bench-tools builds there too)
#   TOOLGATE_BENCH_PPROF=1  after the rounds, profile toolgate (POST),
#                           httputil (GET) and toolgate's MCP tools/call
#                           under the same load, one after the other (CPU
#                           and allocations), and print pprof -top of each;
#                           with BENCH_ROUNDS=0 it only profiles
#   BENCH_PPROF_SECONDS=15  length of each profile
#
# It raises the open-file limit to the hard limit. Every process it starts
# is stopped by PID on exit; the temp dir is removed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

ROUNDS=${BENCH_ROUNDS:-3}
DURATION=${BENCH_DURATION:-10s}
WARMUP=${BENCH_WARMUP:-2s}
CONNS=${BENCH_CONNS:-1 32}
VARIANTS=${BENCH_VARIANTS:-direct nginx httputil toolgate toolgate-transparent toolgate-mcp toolgate-mcp-2026 toolgate-info}
SECTIONS=" ${BENCH_SECTIONS:-main size tools conns idempotency startup inflight} "
STARTUP_TOOLS=(${BENCH_STARTUP_TOOLS:-10 1000 5000})
CURVE_CONNS=${BENCH_CURVE_CONNS:-32}
CURVE_ROUNDS=${BENCH_CURVE_ROUNDS:-$ROUNDS}
IDEM_CONNS=${BENCH_IDEM_CONNS:-1}
INFLIGHT=${BENCH_INFLIGHT:-10000}
MAX_OTHER=${BENCH_MAX_OTHER:-25}
RETRIES=${BENCH_RETRIES:-2}
QUIET_WAIT=${BENCH_QUIET_WAIT:-30}
PPROF=${TOOLGATE_BENCH_PPROF:-0}
PPROF_SECONDS=${BENCH_PPROF_SECONDS:-15}
GO=${GO:-go}
OUT=${BENCH_OUT:-$root/bench/out/$(date -u +%Y%m%dT%H%M%SZ)}

log() { printf 'bench: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
section() { [ "$ROUNDS" -gt 0 ] && [[ $SECTIONS == *" $1 "* ]]; }

# 1,000 connections, and thousands of calls in flight each holding two
# sockets, need more than the usual 1,024 open files.
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
NOFILE=$(ulimit -n)

"$root/bench/deps.sh"
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || die "nginx not found"
command -v wrk >/dev/null || die "wrk not found"
command -v curl >/dev/null || die "curl not found"
if section idempotency; then
  command -v redis-server >/dev/null || die "redis-server not found"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/toolgate-bench.XXXXXX")
# The binaries go to bin/bench (git-ignored, as all of bin/), the same
# place make bench-tools builds them; never to the repository root.
bindir=${BENCH_BIN:-$root/bin/bench}
mkdir -p "$bindir" "$tmp/log" "$tmp/nginx/logs" "$OUT"

# Processes this script started, by PID; cleanup stops exactly these.
pids=()
cleanup() {
  local rc=$? pid i
  trap - EXIT INT TERM
  trap '' PIPE # a reader that went away (| head) must not cut the cleanup short
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    for ((i = 0; i < 50; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "pid $pid ignored SIGTERM; killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
  done
  if [ "$rc" -ne 0 ] && [ -d "$tmp/log" ]; then
    cp -r "$tmp/log" "$OUT/" 2>/dev/null || true
  fi
  rm -rf "$tmp"
  if [ "$rc" -ne 0 ]; then
    log "failed; logs kept in $OUT/log" || true
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# forget drops a PID that has been waited for, so cleanup never signals a
# reused PID.
forget() {
  local pid keep=()
  for pid in "${pids[@]}"; do [ "$pid" = "$1" ] || keep+=("$pid"); done
  pids=("${keep[@]}")
}

# --- CPUs -----------------------------------------------------------------

# cpu_list expands the CPUs this shell may run on ("0-3,6" → 0 1 2 3 6).
cpu_list() {
  local list part
  list=$(taskset -pc $$ 2>/dev/null | sed 's/.*: *//') || return 0
  IFS=, read -ra parts <<<"$list"
  for part in "${parts[@]}"; do
    if [[ $part == *-* ]]; then seq "${part%-*}" "${part#*-}"; else echo "$part"; fi
  done
}

SERVER_PIN=()
LOAD_PIN=()
SERVER_CPU=""
PINNING="none"
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
  mapfile -t cpus < <(cpu_list)
  if [ "${#cpus[@]}" -ge 2 ]; then
    SERVER_CPU=${cpus[0]}
    SERVER_PIN=(taskset -c "$SERVER_CPU")
    LOAD_PIN=(taskset -c "${cpus[1]}")
    PINNING="server side (backend + proxy) on CPU ${cpus[0]}, wrk on CPU ${cpus[1]}"
  fi
fi
if [ ${#SERVER_PIN[@]} -eq 0 ]; then
  log "WARNING: fewer than 2 CPUs (nproc=$(nproc)); not pinning, the load generator competes with the proxies"
  MAX_OTHER=101 # wrk shares the CPU: "other work" is always high, and expected
fi
CLK_TCK=$(getconf CLK_TCK)

# --- build ----------------------------------------------------------------

log "building into $bindir"
export CGO_ENABLED=0
"$GO" build -trimpath -tags grpcnotrace -o "$bindir/toolgate" ./cmd/toolgate
"$GO" build -trimpath -o "$bindir/backend" ./bench/backend
"$GO" build -trimpath -o "$bindir/reverseproxy" ./bench/reverseproxy
"$GO" build -trimpath -o "$bindir/inflight" ./bench/inflight
if [ "$PPROF" = 1 ]; then
  # A profiling build of toolgate: the same package plus one file, added
  # through a build overlay so the work tree is not touched. serve has no
  # pprof endpoint of its own.
  cat >"$tmp/pprof_overlay.go" <<'EOF'
package main

import (
	"net/http"
	_ "net/http/pprof"
	"os"
)

func init() {
	if addr := os.Getenv("TOOLGATE_BENCH_PPROF_LISTEN"); addr != "" {
		go func() { _ = http.ListenAndServe(addr, nil) }()
	}
}
EOF
  printf '{"Replace":{"%s":"%s"}}\n' "$root/cmd/toolgate/zz_bench_pprof.go" "$tmp/pprof_overlay.go" >"$tmp/overlay.json"
  "$GO" build -trimpath -tags grpcnotrace -overlay "$tmp/overlay.json" -o "$bindir/toolgate-pprof" ./cmd/toolgate
fi

# --- ports ----------------------------------------------------------------

declare -A taken=()
# Ports come from outside the kernel's ephemeral range, so that the outgoing
# connections of other programs on a shared machine cannot take one of them
# between the check and the bind.
read -r eph_lo eph_hi </proc/sys/net/ipv4/ip_local_port_range
if [ "$eph_lo" -gt 16000 ]; then
  port_base=10000 port_span=$((eph_lo - 10000))
else
  port_base=$((eph_hi + 1)) port_span=$((65535 - eph_hi))
fi
# port NAME sets PORT[NAME] to a loopback port nothing listens on (and that
# this script has not handed out yet), once.
declare -A PORT=()
port() {
  local p i
  [ -z "${PORT[$1]:-}" ] || return 0
  for ((i = 0; i < 200; i++)); do
    p=$((port_base + (RANDOM * 32768 + RANDOM) % port_span))
    [ -z "${taken[$p]:-}" ] || continue
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      taken[$p]=1
      PORT[$1]=$p
      return
    fi
  done
  die "no free port found"
}

# --- configs --------------------------------------------------------------

# toolgate_policy writes the example policy with its ports moved to the
# given ones and both upstreams pointed at a bench backend, plus options:
#   transparent          server.transparent: true
#   tools=N              N tools: the example's two and copies of search_articles
#   concurrent=N         the search upstream's max_concurrent (bulkhead)
#   timeout=D            the search tool's and upstream's timeouts
#   max_connections=N    server.max_connections
#   max_response_bytes=N server.max_response_bytes
#   redis=URL            state.backend: redis at URL
# Every substitution is checked, so a changed example fails here, loudly.
toolgate_policy() { # out listen admin backend-port [option...]
  local out=$1 listen=$2 admin=$3 backend=$4 opt n i
  shift 4
  sed -e "s#\"127.0.0.1:8080\"#\"127.0.0.1:$listen\"#" \
    -e "s#\"127.0.0.1:9090\"#\"127.0.0.1:$admin\"#" \
    -e "s#url: http://127.0.0.1:700[12]\$#url: http://127.0.0.1:$backend#" \
    examples/policy.yaml >"$out"
  grep -q "listen: \"127.0.0.1:$listen\"" "$out" || die "examples/policy.yaml: server.listen not found"
  grep -q "admin_listen: \"127.0.0.1:$admin\"" "$out" || die "examples/policy.yaml: server.admin_listen not found"
  [ "$(grep -c "url: http://127.0.0.1:$backend\$" "$out")" = 2 ] || die "examples/policy.yaml: the two upstream urls not found"
  for opt in "$@"; do
    case $opt in
    transparent) sedit "$out" 's/^server:$/server:\n  transparent: true/' '^  transparent: true$' ;;
    max_response_bytes=*) sedit "$out" "s/^server:\$/server:\n  max_response_bytes: ${opt#*=}/" "^  max_response_bytes: ${opt#*=}\$" ;;
    max_connections=*) sedit "$out" "s/^server:\$/server:\n  max_connections: ${opt#*=}/" "^  max_connections: ${opt#*=}\$" ;;
    concurrent=*) sedit "$out" "s/^    max_concurrent: 256\$/    max_concurrent: ${opt#*=}/" "^    max_concurrent: ${opt#*=}\$" ;;
    timeout=*)
      sedit "$out" "s/^    timeout: 500ms\$/    timeout: ${opt#*=}/" "^    timeout: ${opt#*=}\$"
      sedit "$out" "s/^    timeout: 800ms\$/    timeout: ${opt#*=}/" "^    timeout: ${opt#*=}\$"
      ;;
    redis=*)
      sedit "$out" "s#^  backend: memory\$#  backend: redis\n  redis:\n    url: ${opt#*=}#" "^    url: ${opt#*=}\$"
      sedit "$out" '/^  max_keys: /d' '^  backend: redis$'
      ;;
    tools=*)
      n=${opt#*=}
      awk '/^  search_articles:$/ { f = 1 } /^  send_notification:$/ { f = 0 } f' examples/policy.yaml >"$out.tool"
      [ -s "$out.tool" ] || die "examples/policy.yaml: search_articles not found"
      # Each copy on a path of its own (they are never called), so that no
      # two tools share a route.
      grep -q '^      path: /api/search$' "$out.tool" || die "examples/policy.yaml: search_articles path not found"
      for ((i = 3; i <= n; i++)); do
        sed -e "s/^  search_articles:\$/  search_articles_$i:/" -e "s#^      path: /api/search\$#      path: /api/search_$i#" "$out.tool"
      done >"$out.tools"
      awk -v f="$out.tools" '/^access:$/ { while ((getline l < f) > 0) print l; print "" } { print }' "$out" >"$out.new"
      mv "$out.new" "$out"
      rm -f "$out.tool" "$out.tools"
      [ "$(grep -c '^  search_articles' "$out")" = $((n - 1)) ] || die "could not add tools to $out"
      ;;
    *) die "toolgate_policy: unknown option $opt" ;;
    esac
  done
  "$bindir/toolgate" check -config "$out" >/dev/null 2>"$out.check" || { cat "$out.check" >&2; die "toolgate check $out failed"; }
}

# sedit edits a file in place and checks that a line matches afterwards.
sedit() { # file expression check
  sed -i "$2" "$1"
  grep -q "$3" "$1" || die "could not apply $2 to $1"
}

cat >"$tmp/nginx/nginx.conf" <<EOF
# The reference reverse proxy: one worker, upstream keep-alive, no access log.
worker_processes 1;
daemon off;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/logs/error.log warn;
worker_rlimit_nofile 8192;
events {
  worker_connections 4096;
}
http {
  access_log off;
  client_body_temp_path $tmp/nginx/client_body;
  proxy_temp_path $tmp/nginx/proxy;
  fastcgi_temp_path $tmp/nginx/fastcgi;
  uwsgi_temp_path $tmp/nginx/uwsgi;
  scgi_temp_path $tmp/nginx/scgi;
  upstream search {
    server 127.0.0.1:__BACKEND__;
    keepalive 64;
  }
  server {
    listen 127.0.0.1:__NGINX__ backlog=4096;
    location / {
      proxy_pass http://search;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
EOF

# wrk scripts: report.lua prints one machine-readable line per run; the
# others add the request: post.lua the tool call, mcp.lua the same call as
# an MCP tools/call, mcp2026.lua that call of revision 2026-07-28, send.lua a side-effecting call with a new
# Idempotency-Key per request, replay.lua the same call with one key.
POST_BODY='{"q":"go","limit":5}'
MCP_BODY='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_articles","arguments":{"q":"go","limit":5}}}'
# What the TypeScript 2.x client (versionNegotiation auto) sends for the
# call: its member order, its _meta, and the headers of MCP_2026_HEADERS.
MCP_2026_BODY='{"method":"tools/call","params":{"name":"search_articles","arguments":{"q":"go","limit":5},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"toolgate-bench","version":"1.0.0"},"io.modelcontextprotocol/clientCapabilities":{}}},"jsonrpc":"2.0","id":1}'
MCP_2026_HEADERS=("Mcp-Protocol-Version: 2026-07-28" "Mcp-Method: tools/call" "Mcp-Name: search_articles")
SEND_BODY='{"user_id":"alice","text":"hello"}'
cat >"$tmp/report.lua" <<'EOF'
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT requests=%d duration_us=%d p50_us=%.0f p99_us=%.0f errors=%d non2xx=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.timeout, e.status))
end
EOF
lua_post() { # body [extra lua]
  printf 'wrk.method = "POST"\nwrk.body = %s\nwrk.headers["Content-Type"] = "application/json"\n' "'$1'"
  printf '%s\n' "${2:-}"
  cat "$tmp/report.lua"
}
lua_post "$POST_BODY" >"$tmp/post.lua"
lua_post "$MCP_BODY" 'wrk.headers["Accept"] = "application/json, text/event-stream"' >"$tmp/mcp.lua"
lua_post "$MCP_2026_BODY" "$(
  echo 'wrk.headers["Accept"] = "application/json, text/event-stream"'
  for h in "${MCP_2026_HEADERS[@]}"; do printf 'wrk.headers["%s"] = "%s"\n' "${h%%: *}" "${h#*: }"; done
)" >"$tmp/mcp2026.lua"
lua_post "$SEND_BODY" 'wrk.headers["Idempotency-Key"] = "bench-replay"' >"$tmp/replay.lua"
lua_post "$SEND_BODY" "$(cat <<'EOF'
math.randomseed(os.time())
local prefix = string.format("bench-%d-%d-", os.time(), math.random(1, 1000000000))
local n = 0
request = function()
  n = n + 1
  wrk.headers["Idempotency-Key"] = prefix .. n
  return wrk.format()
end
EOF
)" >"$tmp/send.lua"

# --- processes ------------------------------------------------------------

declare -A PID=()
start() { # name command...
  local name=$1
  shift
  "${SERVER_PIN[@]}" "$@" >"$tmp/log/$name.log" 2>&1 &
  PID[$name]=$!
  pids+=("$!")
}

# stop ends one process this script started and waits for it.
stop() { # name
  local pid=${PID[$1]}
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  forget "$pid"
  unset "PID[$1]"
}

wait_ready() { # name url
  local name=$1 url=$2 i
  for ((i = 0; i < 100; i++)); do
    curl -fsS -o /dev/null "$url" 2>/dev/null && return 0
    kill -0 "${PID[$name]}" 2>/dev/null || { cat "$tmp/log/$name.log" >&2; die "$name exited at start"; }
    sleep 0.1
  done
  cat "$tmp/log/$name.log" >&2
  die "$name not ready at $url after 10s"
}

serve_backend() { # name [flag...]
  local name=$1
  shift
  port "$name"
  start "$name" "$bindir/backend" -listen "127.0.0.1:${PORT[$name]}" "$@"
  wait_ready "$name" "http://127.0.0.1:${PORT[$name]}/health"
}

serve_httputil() { # name backend [flag...]
  local name=$1 backend=$2
  shift 2
  port "$name"
  start "$name" "$bindir/reverseproxy" -listen "127.0.0.1:${PORT[$name]}" -upstream "http://127.0.0.1:${PORT[$backend]}" "$@"
  wait_ready "$name" "http://127.0.0.1:${PORT[$name]}/health"
}

serve_toolgate() { # name backend log-level [policy option...]
  local name=$1 backend=$2 level=$3
  shift 3
  port "$name"
  port "$name-admin"
  toolgate_policy "$tmp/$name.yaml" "${PORT[$name]}" "${PORT[$name-admin]}" "${PORT[$backend]}" "$@"
  start "$name" "$bindir/toolgate" serve -config "$tmp/$name.yaml" -log-level "$level" -drain-delay 0 -grace 2s -watch=false
  wait_ready "$name" "http://127.0.0.1:${PORT[$name-admin]}/readyz"
}

serve_redis() { # name
  local name=$1 i reply
  port "$name"
  start "$name" redis-server --bind 127.0.0.1 --port "${PORT[$name]}" --save "" --appendonly no \
    --maxmemory-policy noeviction --daemonize no
  for ((i = 0; i < 100; i++)); do
    reply=$( (exec 3<>"/dev/tcp/127.0.0.1/${PORT[$name]}" && printf 'PING\r\n' >&3 && timeout 1 head -c 5 <&3) 2>/dev/null) || true
    [[ $reply == +PONG* ]] && return 0
    sleep 0.1
  done
  cat "$tmp/log/$name.log" >&2
  die "$name not ready after 10s"
}

# The variants: which process serves them, which backend is behind it and
# what kind of request they get.
GET_PATH="/api/search?q=go&limit=5"
declare -A URL=() SCRIPT=() PROC=() BACKEND=() KIND=()
variant() { # name process backend get|post|mcp|mcp2026|send|replay
  local v=$1 path
  case $4 in
  get) path=$GET_PATH SCRIPT[$v]=report.lua ;;
  post) path=/v1/tools/search_articles SCRIPT[$v]=post.lua ;;
  mcp) path=/mcp SCRIPT[$v]=mcp.lua ;;
  mcp2026) path=/mcp SCRIPT[$v]=mcp2026.lua ;;
  send | replay) path=/v1/tools/send_notification SCRIPT[$v]=$4.lua ;;
  *) die "variant $v: unknown kind $4" ;;
  esac
  URL[$v]="http://127.0.0.1:${PORT[$2]}$path"
  PROC[$v]=$2 BACKEND[$v]=$3 KIND[$v]=$4
}

read -ra variants <<<"$VARIANTS"
if section main || [ "$PPROF" = 1 ]; then
  serve_backend backend
fi
if section main; then
  for v in "${variants[@]}"; do
    case $v in
    direct) variant direct backend backend get ;;
    nginx)
      port nginx
      sed -i "s/__BACKEND__/${PORT[backend]}/; s/__NGINX__/${PORT[nginx]}/" "$tmp/nginx/nginx.conf"
      "$NGINX" -t -q -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -e "$tmp/nginx/logs/error.log" || die "nginx -t failed"
      start nginx "$NGINX" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -e "$tmp/nginx/logs/error.log"
      wait_ready nginx "http://127.0.0.1:${PORT[nginx]}/health"
      # The processes whose CPU counts as nginx's: its master and its worker.
      nginx_pids=("${PID[nginx]}")
      for stat in /proc/[0-9]*/stat; do
        ppid=$(sed 's/.*) //' "$stat" 2>/dev/null | awk '{print $2}') || continue
        [ "$ppid" = "${PID[nginx]}" ] && nginx_pids+=("$(basename "$(dirname "$stat")")")
      done
      [ ${#nginx_pids[@]} -ge 2 ] || die "no nginx worker found"
      variant nginx nginx backend get
      ;;
    httputil) serve_httputil httputil backend && variant httputil httputil backend get ;;
    httputil-nopool) serve_httputil httputil-nopool backend -buffer-pool=false && variant httputil-nopool httputil-nopool backend get ;;
    toolgate | toolgate-mcp | toolgate-mcp-2026)
      [ -n "${PID[toolgate]:-}" ] || serve_toolgate toolgate backend warn
      case $v in
      toolgate) variant toolgate toolgate backend post ;;
      toolgate-mcp) variant toolgate-mcp toolgate backend mcp ;;
      toolgate-mcp-2026) variant toolgate-mcp-2026 toolgate backend mcp2026 ;;
      esac
      ;;
    toolgate-transparent) serve_toolgate toolgate-transparent backend warn transparent && variant "$v" "$v" backend get ;;
    toolgate-info) serve_toolgate toolgate-info backend info && variant "$v" "$v" backend post ;;
    *) die "unknown variant $v (BENCH_VARIANTS)" ;;
    esac
  done
fi
SIZES=(1k:0 64k:65536 1m:1048576)
if section size || section tools; then
  for sz in "${SIZES[@]}"; do
    s=${sz%%:*}
    [ "$s" = 1k ] || section size || continue
    if [ "${sz#*:}" = 0 ]; then serve_backend "backend-s$s"; else serve_backend "backend-s$s" -size "${sz#*:}"; fi
    serve_httputil "httputil-s$s" "backend-s$s"
    variant "httputil-s$s" "httputil-s$s" "backend-s$s" get
    section size || continue
    serve_toolgate "toolgate-s$s" "backend-s$s" warn max_response_bytes=$((2 << 20))
    variant "toolgate-s$s" "toolgate-s$s" "backend-s$s" post
  done
fi
TOOL_COUNTS=(10 1000)
if section tools; then
  for n in "${TOOL_COUNTS[@]}"; do
    serve_toolgate "toolgate-t$n" backend-s1k warn "tools=$n"
    variant "toolgate-t$n" "toolgate-t$n" backend-s1k post
  done
fi
CURVE_CONN_COUNTS=(1 32 1000)
if section conns; then
  serve_backend backend-c
  for c in "${CURVE_CONN_COUNTS[@]}"; do
    serve_httputil "httputil-c$c" backend-c
    variant "httputil-c$c" "httputil-c$c" backend-c get
    serve_toolgate "toolgate-c$c" backend-c warn concurrent=2048
    variant "toolgate-c$c" "toolgate-c$c" backend-c post
  done
fi
if section idempotency; then
  serve_backend backend-i
  serve_redis redis
  serve_toolgate toolgate-i backend-i warn
  serve_toolgate toolgate-redis backend-i warn "redis=redis://127.0.0.1:${PORT[redis]}/0"
  variant send-memory toolgate-i backend-i send
  variant replay-memory toolgate-i backend-i replay
  variant send-redis toolgate-redis backend-i send
  variant replay-redis toolgate-redis backend-i replay
fi

proxy_pids() { # variant
  case ${PROC[$1]} in
  nginx) echo "${nginx_pids[@]}" ;;
  redis) die "not a proxy" ;;
  *) echo "${PID[${PROC[$1]}]}" ;;
  esac
}

# answer makes one request to a hop and prints the body; it fails unless
# the answer is 200 with the search results (toolgate: its ok envelope;
# MCP: a result whose envelope is ok, and of 2026-07-28 complete).
answer() { # variant
  local v=$1 body
  case ${KIND[$v]} in
  get) body=$(curl -fsS "${URL[$v]}") ;;
  post) body=$(curl -fsS -H 'Content-Type: application/json' -d "$POST_BODY" "${URL[$v]}") ;;
  mcp) body=$(curl -fsS -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -d "$MCP_BODY" "${URL[$v]}") ;;
  mcp2026) body=$(curl -fsS -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
    "${MCP_2026_HEADERS[@]/#/-H}" -d "$MCP_2026_BODY" "${URL[$v]}") ;;
  send) body=$(curl -fsS -H 'Content-Type: application/json' -H "Idempotency-Key: bench-check-$RANDOM-$RANDOM-$RANDOM" -d "$SEND_BODY" "${URL[$v]}") ;;
  replay) body=$(curl -fsS -H 'Content-Type: application/json' -H "Idempotency-Key: bench-replay" -d "$SEND_BODY" "${URL[$v]}") ;;
  esac || return 1
  printf '%s\n' "$body"
  case ${KIND[$v]}:${PROC[$v]} in
  mcp:*) [[ $body == *'"structuredContent":{"status":"ok"'* ]] ;;
  mcp2026:*) [[ $body == *'"structuredContent":{"status":"ok"'* && $body == *'"resultType":"complete"'* ]] ;;
  *:toolgate*) [[ $body == *'"status":"ok"'* ]] ;;
  *) [[ $body == *'"results":'* ]] ;;
  esac
}

# Sanity: every hop answers right before anything is timed.
for v in "${!URL[@]}"; do
  answer "$v" >"$tmp/log/sample-$v.json" || die "$v: not a good answer: $(head -c 2000 "$tmp/log/sample-$v.json")"
done

# wait_ok waits until a hop answers right again: after failures toolgate's
# circuit breaker may be open (open_for: 30s in the example policy).
wait_ok() { # variant
  local i
  for ((i = 0; i < 45; i++)); do
    answer "$1" >/dev/null 2>&1 && return 0
    sleep 1
  done
  die "$1 does not answer right 45s after a failed run"
}

# wait_quiet waits, at most BENCH_QUIET_WAIT seconds, for one second in which
# other work used no more than BENCH_MAX_OTHER % of the server CPU.
wait_quiet() {
  local i a b
  [ -n "$SERVER_CPU" ] || return 0
  for ((i = 0; i < QUIET_WAIT; i++)); do
    a=$(server_cpu)
    sleep 1
    b=$(server_cpu)
    awk -v a="$a" -v b="$b" -v m="$MAX_OTHER" 'BEGIN { split(a, x, " "); split(b, y, " ")
      exit !(y[2] > x[2] && 100 * (y[1] - x[1]) / (y[2] - x[2]) <= m) }' && return 0
  done
  log "the server CPU stayed busy with other work for ${QUIET_WAIT}s; measuring anyway"
}

# ticks prints the utime+stime (clock ticks) of the given PIDs together.
ticks() {
  local total=0 pid t
  for pid in "$@"; do
    t=$(sed 's/.*) //' "/proc/$pid/stat" | awk '{print $12 + $13}')
    total=$((total + t))
  done
  echo "$total"
}

# hwm prints the peak resident memory (VmHWM, KiB) of a PID.
hwm() { awk '/^VmHWM/ { print $2 }' "/proc/$1/status"; }
anon() { awk '/^RssAnon/ { print $2 }' "/proc/$1/status" 2>/dev/null; }

# server_cpu prints "busy total" clock ticks of the server CPU so far (of all
# CPUs without pinning).
server_cpu() {
  awk -v cpu="cpu$SERVER_CPU" '$1 == cpu { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat
}

# run_wrk prints "rps p50_us p99_us requests errors non2xx proxy_us_per_req
# backend_us_per_req other_pct peak_rss_kib", where other_pct is the share of
# the server CPU that went to anything but the backend, Redis and the proxy
# under test (other tenants of a shared machine, interrupts): the noise of that
# run; and peak_rss_kib the proxy's VmHWM (nginx: its worker's).
run_wrk() { # variant conns duration
  local v=$1 c=$2 d=$3 p0 p1 b0 b1 e0 e1 s0 s1 out line same=0 bpid
  local -a pp ep=()
  read -ra pp <<<"$(proxy_pids "$v")"
  bpid=${PID[${BACKEND[$v]}]}
  [ "${PROC[$v]}" != "${BACKEND[$v]}" ] || same=1
  # Redis works for the proxy under test: its CPU is not other work.
  [ "${PROC[$v]}" != toolgate-redis ] || ep=("${PID[redis]}")
  out="$tmp/log/wrk-$v-$c-$(date +%s%N).txt"
  s0=$(server_cpu)
  p0=$(ticks "${pp[@]}")
  b0=$(ticks "$bpid")
  e0=$(ticks "${ep[@]}")
  "${LOAD_PIN[@]}" wrk -t1 -c"$c" -d"$d" --latency -s "$tmp/${SCRIPT[$v]}" "${URL[$v]}" >"$out" 2>&1 ||
    { cat "$out" >&2; die "wrk failed for $v"; }
  p1=$(ticks "${pp[@]}")
  b1=$(ticks "$bpid")
  e1=$(ticks "${ep[@]}")
  s1=$(server_cpu)
  line=$(grep '^RESULT ' "$out") || { cat "$out" >&2; die "no RESULT from wrk for $v"; }
  awk -v same="$same" -v line="$line" -v dp=$((p1 - p0)) -v db=$((b1 - b0)) -v de=$((e1 - e0)) -v hz="$CLK_TCK" -v s0="$s0" -v s1="$s1" \
    -v rss="$(hwm "${pp[${#pp[@]} - 1]}")" 'BEGIN {
    n = split(line, f, /[ =]/)
    for (i = 2; i < n; i += 2) r[f[i]] = f[i + 1]
    req = r["requests"] > 0 ? r["requests"] : 1
    if (same) db = 0 # the backend is the process under test; count it once
    split(s0, a, " "); split(s1, b, " ")
    other = b[2] > a[2] ? 100 * ((b[1] - a[1]) - dp - db - de) / (b[2] - a[2]) : 0
    if (other < 0) other = 0
    printf "%.1f %d %d %d %d %d %.2f %.2f %.1f %d\n", r["requests"] / (r["duration_us"] / 1e6), r["p50_us"], r["p99_us"],
      r["requests"], r["errors"], r["non2xx"], dp * 1e6 / hz / req, (same ? dp : db) * 1e6 / hz / req, other, rss
  }'
}

# --- rounds ---------------------------------------------------------------

# measure runs each VARIANT@CONNS item once per round, in an order that
# rotates each round so no item always follows another, after one warm-up
# run per variant, and appends "round variant conns run_wrk..." to RAW.
measure() { # raw rounds item...
  local raw=$1 rounds=$2
  shift 2
  local -a items=("$@")
  local -A warm=()
  local n=$# r k item v c try res why errs non2xx other
  if [ "$WARMUP" != 0 ] && [ "$WARMUP" != 0s ]; then
    log "warming up ${#items[@]} runs' variants for $WARMUP each"
    for item in "${items[@]}"; do
      v=${item%@*} c=${item#*@}
      [ -z "${warm[$v]:-}" ] || continue
      warm[$v]=1
      run_wrk "$v" $((c > 32 ? c : 32)) "$WARMUP" >/dev/null
    done
  fi
  for ((r = 1; r <= rounds; r++)); do
    for ((k = 0; k < n; k++)); do
      item=${items[$(((k + r - 1) % n))]}
      v=${item%@*} c=${item#*@}
      # A run is taken again when other work took the server CPU or when
      # requests failed (which on a starved CPU are timeouts, and then
      # toolgate's breaker answering for the backend): neither measures
      # the hop.
      for ((try = 0; ; try++)); do
        wait_quiet
        res=$(run_wrk "$v" "$c" "$DURATION")
        read -r _ _ _ _ errs non2xx _ _ other _ <<<"$res"
        why=""
        if [ $((errs + non2xx)) -gt 0 ]; then
          why="$((errs + non2xx)) requests failed"
        elif awk -v o="$other" -v m="$MAX_OTHER" 'BEGIN { exit !(o > m) }'; then
          why="${other}% of the server CPU went to other work"
        fi
        if [ -z "$why" ] || [ "$try" -ge "$RETRIES" ]; then
          break
        fi
        log "round $r/$rounds  c=$c  $v: $why; running it again"
        wait_ok "$v"
      done
      printf '%s\t%s\t%s\t%s\n' "$r" "$v" "$c" "${res// /$'\t'}" >>"$raw"
      log "round $r/$rounds  c=$c  $(printf '%-21s' "$v") $res"
    done
  done
}

read -ra conns <<<"$CONNS"
raw="$tmp/raw.tsv"
: >"$raw"
if section main; then
  items=()
  for c in "${conns[@]}"; do for v in "${variants[@]}"; do items+=("$v@$c"); done; done
  measure "$raw" "$ROUNDS" "${items[@]}"
fi
# Item names hold no spaces: the lists below are split into words.
if section size; then
  measure "$tmp/raw-size.tsv" "$CURVE_ROUNDS" $(for sz in "${SIZES[@]}"; do echo "httputil-s${sz%%:*}@$CURVE_CONNS toolgate-s${sz%%:*}@$CURVE_CONNS"; done)
fi
if section tools; then
  measure "$tmp/raw-tools.tsv" "$CURVE_ROUNDS" "httputil-s1k@$CURVE_CONNS" $(for n in "${TOOL_COUNTS[@]}"; do echo "toolgate-t$n@$CURVE_CONNS"; done)
fi
if section conns; then
  measure "$tmp/raw-conns.tsv" "$CURVE_ROUNDS" $(for c in "${CURVE_CONN_COUNTS[@]}"; do echo "httputil-c$c@$c toolgate-c$c@$c"; done)
fi
if section idempotency; then
  items=()
  for c in $IDEM_CONNS; do items+=("send-memory@$c" "replay-memory@$c" "send-redis@$c" "replay-redis@$c"); done
  measure "$tmp/raw-idem.tsv" "$CURVE_ROUNDS" "${items[@]}"
fi

# --- in flight --------------------------------------------------------------

# Each hop gets a backend of its own that holds every search for 200 ms,
# and is stopped after its run, so that its idle connections do not take
# the backend's open files from the next hop.
inflight_raw="$tmp/raw-inflight.txt"
: >"$inflight_raw"
if section inflight; then
  n=$(((NOFILE - 200) / 2))
  n=$((INFLIGHT < n ? INFLIGHT : n))
  [ "$n" = "$INFLIGHT" ] || log "in-flight test with $n calls: the open-file limit is $NOFILE and a proxied call holds two sockets"
  for hop in direct httputil toolgate; do
    serve_backend backend-slow -delay 200ms
    case $hop in
    direct) target=backend-slow url="http://127.0.0.1:${PORT[backend-slow]}$GET_PATH" body="" want='"results":' ;;
    httputil)
      serve_httputil httputil-slow backend-slow
      target=httputil-slow url="http://127.0.0.1:${PORT[httputil-slow]}$GET_PATH" body="" want='"results":'
      ;;
    toolgate)
      # Room for every call: a caller's share of the bulkhead is seven
      # eighths of max_concurrent, and every call here is one caller's.
      serve_toolgate toolgate-slow backend-slow warn concurrent=$((2 * n)) max_connections=$((n + 100)) timeout=30s
      target=toolgate-slow url="http://127.0.0.1:${PORT[toolgate-slow]}/v1/tools/search_articles" body=$POST_BODY want='"status":"ok"'
      ;;
    esac
    wait_quiet
    log "in flight: $n calls through $hop"
    line=$("${LOAD_PIN[@]}" "$bindir/inflight" -url "$url" -body "$body" -want "$want" -n "$n" -waves 3 \
      -pid "${PID[$target]}" -held "http://127.0.0.1:${PORT[backend-slow]}/bench/inflight" 2>"$tmp/log/inflight-$hop.err") ||
      { cat "$tmp/log/inflight-$hop.err" >&2; die "inflight failed for $hop"; }
    log "$line"
    printf '%s %s\n' "$hop" "$line" >>"$inflight_raw"
    [ "$target" = backend-slow ] || stop "$target"
    stop backend-slow
    unset "PORT[backend-slow]" "PORT[$target]"
  done
fi

rss() { awk '/^VmRSS/ {printf "%.1f MiB", $2 / 1024}' "/proc/$1/status"; }

# tools_dir writes a policy directory for toolgate with n tools: the
# example policy (its ports moved, both upstreams on backend) and copies
# of search_articles, each on a path of its own, 1,000 to a file.
tools_dir() { # dir listen admin backend n
  local dir=$1 n=$5 i
  mkdir -p "$dir"
  toolgate_policy "$dir/policy.yaml" "$2" "$3" "$4"
  awk '/^  search_articles:$/ { f = 1 } /^  send_notification:$/ { f = 0 } f' examples/policy.yaml >"$dir.tool"
  for ((i = 3; i <= n; i++)); do
    [ $(((i - 3) % 1000)) = 0 ] && printf 'version: 1\ntools:\n' >"$dir/tools-$i.yaml"
    sed -e "s/^  search_articles:\$/  search_articles_$i:/" -e "s#^      path: /api/search\$#      path: /api/search_$i#" "$dir.tool" >>"$dir/tools-$(((i - 3) / 1000 * 1000 + 3)).yaml"
  done
  rm -f "$dir.tool"
  # Files older than the loader's settle window, so the start measured is
  # not a wait for files still being written.
  touch -d '1 minute ago' "$dir"/*.yaml "$dir"
}

# startup: a row "tools ready_ms peak_rss_kib ready_rss_kib peak_anon_kib
# ready_anon_kib heap_kib" per start, and a line "reload ..." for the reload
# under load.
startup_raw=$tmp/raw-startup.tsv
if section startup; then
  serve_backend backend-st
  for n in "${STARTUP_TOOLS[@]}"; do
    name=toolgate-st$n
    port "$name"
    port "$name-admin"
    tools_dir "$tmp/$name" "${PORT[$name]}" "${PORT[$name-admin]}" "${PORT[backend-st]}" "$n"
    "$bindir/toolgate" check -config "$tmp/$name" >/dev/null 2>"$tmp/$name.check" || { cat "$tmp/$name.check" >&2; die "toolgate check $tmp/$name failed"; }
    t0=$(date +%s%N)
    start "$name" "$bindir/toolgate" serve -config "$tmp/$name" -log-level warn -drain-delay 0 -grace 2s -watch=false
    # The kernel keeps no peak of the anonymous RSS (the heap, without the
    # binary's pages): it is sampled at each poll, every 10 ms or so.
    anon_peak=0
    for ((i = 0; i < 12000; i++)); do
      a=$(anon "${PID[$name]}")
      [ "${a:-0}" -gt "$anon_peak" ] && anon_peak=$a
      curl -fsS -o /dev/null "http://127.0.0.1:${PORT[$name-admin]}/readyz" 2>/dev/null && break
      kill -0 "${PID[$name]}" 2>/dev/null || { cat "$tmp/log/$name.log" >&2; die "$name exited at start"; }
      sleep 0.01
    done
    t1=$(date +%s%N)
    sleep 2
    heap=$(curl -fsS "http://127.0.0.1:${PORT[$name-admin]}/metrics" | awk '/^go_memstats_heap_alloc_bytes / { printf "%d", $2 / 1024 }')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" $(((t1 - t0) / 1000000)) "$(hwm "${PID[$name]}")" "$(awk '/^VmRSS/ { print $2 }' "/proc/${PID[$name]}/status")" \
      "$anon_peak" "$(anon "${PID[$name]}")" "$heap" >>"$startup_raw"
    if [ "$n" = 1000 ]; then
      # A reload of the same 1,000 tools (a description changed in each)
      # while wrk calls search_articles for 10 s at 8 connections.
      sed -i 's/^    description: Search articles by keyword\./    description: Search articles by keyword (reloaded)./' "$tmp/$name"/*.yaml
      touch -d '1 minute ago' "$tmp/$name"/*.yaml "$tmp/$name"
      "${LOAD_PIN[@]}" wrk -t1 -c8 -d10s --latency -s "$tmp/post.lua" "http://127.0.0.1:${PORT[$name]}/v1/tools/search_articles" >"$tmp/log/$name-wrk.log" 2>&1 &
      wrk_pid=$!
      sleep 3
      before=$(hwm "${PID[$name]}")
      r0=$(date +%s%N)
      code=$(curl -s -o "$tmp/log/$name-reload.json" -w '%{http_code}' -X POST "http://127.0.0.1:${PORT[$name-admin]}/-/reload")
      r1=$(date +%s%N)
      wait "$wrk_pid" || true
      sed -n 's/^RESULT //p' "$tmp/log/$name-wrk.log" | awk -v code="$code" -v ms=$(((r1 - r0) / 1000000)) -v before="$before" \
        -v after="$(hwm "${PID[$name]}")" -v rss="$(awk '/^VmRSS/ { print $2 }' "/proc/${PID[$name]}/status")" \
        '{ print "reload", code, ms, before, after, rss, $0 }' >>"$startup_raw"
    fi
    stop "$name"
  done
  stop backend-st
fi

# --- table ----------------------------------------------------------------

# awk helpers every table shares: the median over a key's values, ratios.
AWK_FUNCS='
  function median(key,   n, i, j, t, a) {
    n = cnt[key]
    for (i = 1; i <= n; i++) a[i] = val[key, i]
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    if (n == 0) return ""
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  function add(key, x) { val[key, ++cnt[key]] = x }
  function ratio(x, y) { return (x == "" || y == "" || y <= 0) ? "n/a" : sprintf("%.2f×", x / y) }
'

# The table: medians over rounds per variant and connection count. Added
# latency is the variant's p50/p99 minus direct's in the same round, then
# the median over rounds, so drift between rounds cancels.
table() {
  awk -F'\t' -v order="$VARIANTS" -v conns="$CONNS" "$AWK_FUNCS"'
  function ms(us) { return us == "" ? "—" : sprintf("%.3f", us / 1000) }
  function plus(us) { return us == "" ? "—" : sprintf("%+.3f", us / 1000) }
  { r = $1; v = $2; c = $3
    rps[r, v, c] = $4; p50[r, v, c] = $5; p99[r, v, c] = $6; errs[v, c] += $8 + $9
    add("rps" SUBSEP v SUBSEP c, $4); add("p50" SUBSEP v SUBSEP c, $5); add("p99" SUBSEP v SUBSEP c, $6)
    add("cpu" SUBSEP v SUBSEP c, $10); add("bcpu" SUBSEP v SUBSEP c, $11)
    seen[r] = 1 }
  END {
    for (r in seen) for (k in p50) { split(k, f, SUBSEP); if (f[1] == r && (r, "direct", f[3]) in p50) {
      add("a50" SUBSEP f[2] SUBSEP f[3], p50[k] - p50[r, "direct", f[3]])
      add("a99" SUBSEP f[2] SUBSEP f[3], p99[k] - p99[r, "direct", f[3]]) } }
    label["direct"] = "direct to backend"; label["nginx"] = "nginx"; label["httputil"] = "httputil.ReverseProxy (tuned)"; label["httputil-nopool"] = "httputil, no BufferPool (issue 8)"
    label["toolgate"] = "toolgate POST /v1/tools"; label["toolgate-transparent"] = "toolgate transparent GET"
    label["toolgate-info"] = "toolgate POST, info logging"; label["toolgate-mcp"] = "toolgate MCP tools/call"; label["toolgate-mcp-2026"] = "toolgate MCP tools/call, 2026-07-28"
    print "| hop | conns | req/s | p50 ms | p99 ms | added p50 ms | added p99 ms | proxy CPU µs/req | CPU vs nginx / httputil | added p50 vs nginx / httputil | added p99 vs nginx / httputil | backend CPU µs/req |"
    print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    nv = split(order, vs, " "); nc = split(conns, cs, " ")
    for (ci = 1; ci <= nc; ci++) for (vi = 1; vi <= nv; vi++) {
      v = vs[vi]; c = cs[ci]; s = SUBSEP v SUBSEP c
      if (!cnt["rps" s]) continue
      cpu = median("cpu" s); a50 = median("a50" s); a99 = median("a99" s)
      ncpu = median("cpu" SUBSEP "nginx" SUBSEP c); hcpu = median("cpu" SUBSEP "httputil" SUBSEP c)
      n50 = median("a50" SUBSEP "nginx" SUBSEP c); h50 = median("a50" SUBSEP "httputil" SUBSEP c)
      n99 = median("a99" SUBSEP "nginx" SUBSEP c); h99 = median("a99" SUBSEP "httputil" SUBSEP c)
      direct = (v == "direct")
      printf "| %s | %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %.1f |\n", (v in label ? label[v] : v), c,
        median("rps" s), ms(median("p50" s)), ms(median("p99" s)),
        direct ? "—" : plus(a50), direct ? "—" : plus(a99),
        direct ? "—" : sprintf("%.1f", cpu),
        direct ? "—" : ratio(cpu, ncpu) " / " ratio(cpu, hcpu),
        direct ? "—" : ratio(a50, n50) " / " ratio(a50, h50),
        direct ? "—" : ratio(a99, n99) " / " ratio(a99, h99),
        median("bcpu" s)
    }
    for (k in errs) if (errs[k] > 0) { split(k, f, SUBSEP); printf "\nWARNING: %s at %s connections: %d errors or non-2xx answers\n", f[1], f[2], errs[k] }
  }' "$raw"
}

# awk helpers the curve tables share: AWK_FUNCS, units, and the reading of
# a raw run.
AWK_LIB="$AWK_FUNCS"'
  function ms(us) { return us == "" ? "—" : sprintf("%.2f", us / 1000) }
  function mib(kib) { return kib == "" ? "—" : sprintf("%.0f", kib / 1024) }
  { r = $1; v = $2; c = $3; s = SUBSEP v SUBSEP c
    p50[r, v, c] = $5; p99[r, v, c] = $6; cpu[r, v, c] = $10; errs[v, c] += $8 + $9
    add("rps" s, $4); add("p50" s, $5); add("p99" s, $6); add("cpu" s, $10); add("bcpu" s, $11)
    if ($13 > rss[v, c]) rss[v, c] = $13
    seen[r] = 1 }
  function warnings(   k, f) {
    for (k in errs) if (errs[k] > 0) { split(k, f, SUBSEP); printf "\nWARNING: %s at %s connections: %d errors or non-2xx answers\n", f[1], f[2], errs[k] }
  }
'

# curve_table prints one scale curve: a row per SPEC "label|httputil
# variant|toolgate variant|conns" with both hops' CPU per request, the
# ratio, their peak resident memory and latencies.
curve_section() { # heading intro raw first-column-title spec...: one scale curve's section
  local heading=$1 intro=$2
  shift 2
  printf '\n### %s\n\n%s\n\n' "$heading" "$intro"
  curve_table "$@"
}

curve_table() { # raw first-column-title spec...
  local raw=$1 title=$2
  shift 2
  awk -F'\t' -v specs="$(printf '%s\n' "$@")" -v title="$title" "$AWK_LIB"'
  END {
    print "| " title " | httputil CPU µs/req | toolgate CPU µs/req | toolgate ÷ httputil | httputil peak RSS MiB | toolgate peak RSS MiB | httputil p50 / p99 ms | toolgate p50 / p99 ms | toolgate req/s |"
    print "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    n = split(specs, lines, "\n")
    for (i = 1; i <= n; i++) {
      if (split(lines[i], f, "|") < 4) continue
      h = SUBSEP f[2] SUBSEP f[4]; t = SUBSEP f[3] SUBSEP f[4]
      hc = median("cpu" h); tc = median("cpu" t)
      printf "| %s | %s | %s | %s | %s | %s | %s / %s | %s / %s | %s |\n", f[1],
        hc == "" ? "—" : sprintf("%.1f", hc), tc == "" ? "—" : sprintf("%.1f", tc), ratio(tc, hc),
        mib(rss[f[2], f[4]]), mib(rss[f[3], f[4]]),
        ms(median("p50" h)), ms(median("p99" h)), ms(median("p50" t)), ms(median("p99" t)),
        median("rps" t) == "" ? "—" : sprintf("%.0f", median("rps" t))
    }
    warnings()
  }' "$raw"
}

# idem_table prints the idempotency runs: each call with each store, then
# replay ÷ forwarded and what Redis adds, both per round, then the median.
idem_table() { # raw
  awk -F'\t' "$AWK_LIB"'
  END {
    print "| call | store | conns | req/s | p50 ms | p99 ms | toolgate CPU µs/req | peak RSS MiB |"
    print "|---|---|---:|---:|---:|---:|---:|---:|"
    nk = split("send replay", kinds, " "); ns = split("memory redis", stores, " ")
    for (k in cnt) { split(k, f, SUBSEP); if (f[1] == "rps") conns[f[3]] = 1 }
    for (c in conns) {
      for (si = 1; si <= ns; si++) for (ki = 1; ki <= nk; ki++) {
        v = kinds[ki] "-" stores[si]; s = SUBSEP v SUBSEP c
        if (!cnt["rps" s]) continue
        printf "| %s | %s | %s | %.0f | %s | %s | %.1f | %s |\n", kinds[ki] == "send" ? "forwarded (new key)" : "replay (same key)",
          stores[si], c, median("rps" s), ms(median("p50" s)), ms(median("p99" s)), median("cpu" s), mib(rss[v, c])
      }
      for (r in seen) for (si = 1; si <= ns; si++) {
        st = stores[si]
        if ((r, "send-" st, c) in cpu && (r, "replay-" st, c) in cpu) {
          add("rc" SUBSEP st SUBSEP c, cpu[r, "replay-" st, c] / cpu[r, "send-" st, c])
          add("rl" SUBSEP st SUBSEP c, p50[r, "replay-" st, c] / p50[r, "send-" st, c])
        }
      }
      for (r in seen) if ((r, "send-redis", c) in p50 && (r, "send-memory", c) in p50) {
        add("ra" SUBSEP c, p50[r, "send-redis", c] - p50[r, "send-memory", c])
        add("rcpu" SUBSEP c, cpu[r, "send-redis", c] - cpu[r, "send-memory", c])
      }
      print ""
      for (si = 1; si <= ns; si++) if (cnt["rc" SUBSEP stores[si] SUBSEP c])
        printf "- %s store, %s conns: a replay costs %.2f× the CPU of a forwarded call and takes %.2f× its p50 (goal < 0.5×)\n",
          stores[si], c, median("rc" SUBSEP stores[si] SUBSEP c), median("rl" SUBSEP stores[si] SUBSEP c)
      if (cnt["ra" SUBSEP c])
        printf "- Redis instead of the memory store adds %+.3f ms p50 (goal ≤ 0.2 ms) and %+.1f µs toolgate CPU to a forwarded side-effecting call, %s conns\n",
          median("ra" SUBSEP c) / 1000, median("rcpu" SUBSEP c), c
    }
    warnings()
  }' "$1"
}

# inflight_table prints bench/inflight's lines, one row per hop.
inflight_table() { # raw
  awk '
  BEGIN {
    print "| hop | calls | most held at once by the backend | errors (warm-up wave) | p50 ms | p99 ms | max ms | slowest wave ms | RSS start → peak MiB | memory per in-flight call KiB |"
    print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    label["direct"] = "direct to backend"; label["httputil"] = "httputil.ReverseProxy"; label["toolgate"] = "toolgate POST /v1/tools"
  }
  { delete r; for (i = 3; i <= NF; i++) { split($i, kv, "="); r[kv[1]] = kv[2] }
    printf "| %s | %d | %d | %d (%d) | %.1f | %.1f | %.1f | %d | %.0f → %.0f | %.1f |\n", label[$1], r["n"], r["held_max"], r["errors"], r["warm_errors"],
      r["p50_ms"], r["p99_ms"], r["max_ms"], r["wave_ms"], r["rss_start_kib"] / 1024, r["rss_peak_kib"] / 1024, r["per_call_kib"] }
  ' "$1"
}

if [ "$ROUNDS" -gt 0 ]; then
  {
    echo "## Load benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), kernel $(uname -r)"
    echo "- $("$GO" version | sed 's/^go version //'), $("$NGINX" -v 2>&1 | sed 's/^nginx version: //'), $(wrk -v 2>&1 | head -1 | awk '{print "wrk " $2}')"
    echo "- pinning: $PINNING; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
    cat "$tmp"/raw*.tsv | awk -F'\t' '{ n++; s[n] = $12 } END {
      if (!n) exit
      for (i = 2; i <= n; i++) { t = s[i]; for (j = i - 1; j >= 1 && s[j] > t; j--) s[j + 1] = s[j]; s[j + 1] = t }
      printf "- CPU time on the server CPU outside the measured processes (other tenants, interrupts) per run: median %.0f %%, max %.0f %%\n",
        n % 2 ? s[(n + 1) / 2] : (s[n / 2] + s[n / 2 + 1]) / 2, s[n] }'
    echo "- $ROUNDS interleaved rounds (curves and idempotency: $CURVE_ROUNDS) × $DURATION; medians over rounds; wrk -t1"
    echo "- toolgate built from $(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo "an unknown tree")"
    echo "- command: BENCH_SECTIONS=\"$(echo $SECTIONS)\" BENCH_ROUNDS=$ROUNDS BENCH_DURATION=$DURATION BENCH_CONNS=\"$CONNS\" BENCH_VARIANTS=\"$VARIANTS\" bench/run.sh"
    if section main; then
      echo
      echo "### Side by side, 1 KiB search answers"
      echo
      echo "Response bytes: $(for v in "${variants[@]}"; do printf '%s %s, ' "$v" "$(wc -c <"$tmp/log/sample-$v.json")"; done | sed 's/, $//')."
      echo
      table
      echo
      echo "Resident memory after the run: $(for v in httputil httputil-nopool toolgate toolgate-transparent toolgate-info; do
        [ -n "${PID[$v]:-}" ] && printf '%s %s; ' "$v" "$(rss "${PID[$v]}")"
      done)$([ -n "${nginx_pids[1]:-}" ] && echo "nginx worker $(rss "${nginx_pids[1]}")")." | sed 's/; \.$/./'
    fi
    if section size; then
      specs=()
      for sz in "${SIZES[@]}"; do
        s=${sz%%:*}
        specs+=("${s%?} $(case $s in *k) echo KiB ;; *m) echo MiB ;; esac)|httputil-s$s|toolgate-s$s|$CURVE_CONNS")
      done
      curve_section "Answer size, $CURVE_CONNS connections" \
        "toolgate answers with the envelope; the observation is bounded (1,800 characters), the data is not. These toolgates have server.max_response_bytes: 2 MiB (the default 1 MiB refuses the 1 MiB answer). Response bytes: $(
          for sz in "${SIZES[@]}"; do printf 'httputil %s, toolgate %s; ' "$(wc -c <"$tmp/log/sample-httputil-s${sz%%:*}.json")" "$(wc -c <"$tmp/log/sample-toolgate-s${sz%%:*}.json")"; done | sed 's/; $//')." \
        "$tmp/raw-size.tsv" "answer" "${specs[@]}"
    fi
    if section tools; then
      mapfile -t specs < <(printf "%s tools|httputil-s1k|toolgate-t%s|$CURVE_CONNS\n" $(for n in "${TOOL_COUNTS[@]}"; do echo "$n $n"; done))
      curve_section "Tools in the policy, $CURVE_CONNS connections, 1 KiB answers" \
        "The example's two tools plus copies of search_articles; the calls go to search_articles. The httputil column is the same run of httputil for every row." \
        "$tmp/raw-tools.tsv" "tools" "${specs[@]}"
    fi
    if section conns; then
      mapfile -t specs < <(printf '%s|httputil-c%s|toolgate-c%s|%s\n' $(for c in "${CURVE_CONN_COUNTS[@]}"; do echo "$c $c $c $c"; done))
      curve_section "Connections, 1 KiB answers" \
        "A process of its own per row; toolgate's search upstream has max_concurrent: 2048 (the example's 256, and its per-caller share of seven eighths, would refuse calls at 1,000 connections), httputil's idle pool holds 16,384." \
        "$tmp/raw-conns.tsv" "conns" "${specs[@]}"
    fi
    if section idempotency; then
      echo
      echo "### Idempotency: replay and the Redis store"
      echo
      echo "send_notification through toolgate ($SEND_BODY). Forwarded: a new Idempotency-Key per request (claim, call, complete); replay: one key, answered from the store. Redis: a local redis-server on the server CPU."
      echo
      idem_table "$tmp/raw-idem.tsv"
    fi
    if section startup; then
      echo
      echo "### Start and reload with many tools"
      echo
      echo "The example policy plus copies of search_articles (1,000 to a file). Ready: exec to the first 200 from /readyz. Peak RSS: VmHWM, reached while the policy compiles; RSS 2 s after ready, once the garbage of compiling has been returned to the system (the copies share one compiled argument schema: about 2 KiB of live heap per tool, docs/performance.md). Reload: POST /-/reload of the 1,000-tool policy (every description changed) while wrk -c8 calls search_articles for 10 s."
      echo
      echo "Anonymous: RssAnon, the RSS without the binary's pages (its peak sampled at each poll of /readyz); heap: go_memstats_heap_alloc_bytes 2 s after ready, about the live heap once the garbage of compiling is collected. Issue 33's goal: peak RSS ≤ 2× the live heap."
      echo
      echo "| tools | ready ms | peak RSS MiB | RSS when ready MiB | peak anonymous MiB | anonymous when ready MiB | heap when ready MiB | peak anonymous ÷ heap |"
      echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
      awk -F'\t' '$1 != "reload" && NF == 7 { printf "| %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f× |\n", $1, $2, $3 / 1024, $4 / 1024, $5 / 1024, $6 / 1024, $7 / 1024, ($7 > 0 ? $5 / $7 : 0) }' "$startup_raw"
      awk '$1 == "reload" {
        for (i = 7; i <= NF; i++) { split($i, kv, "="); r[kv[1]] = kv[2] }
        printf "\nReload of 1,000 tools under load: HTTP %s in %s ms; peak RSS %.1f MiB before, %.1f MiB after, RSS %.1f MiB after; during the 10 s: %d calls, %d errors, %d non-2xx, p50 %.2f ms, p99 %.2f ms.\n",
          $2, $3, $4 / 1024, $5 / 1024, $6 / 1024, r["requests"], r["errors"], r["non2xx"], r["p50_us"] / 1000, r["p99_us"] / 1000 }' "$startup_raw"
    fi
    if section inflight; then
      echo
      echo "### Calls in flight at once, backend answering after 200 ms"
      echo
      echo "bench/inflight: each wave starts every call together on its own keep-alive connection; the first wave opens the connections and is not measured, then 2 measured waves. Latency: request written to answer read. Memory per call: (peak RSS − RSS at start) ÷ calls, the connection included. Goals: ≤ 16 KiB per call, no errors, p99 ≤ 225 ms."
      echo
      inflight_table "$inflight_raw"
    fi
  } >"$OUT/table.md"
  cp "$tmp"/raw*.tsv "$inflight_raw" "$OUT/"
  cp -r "$tmp/log" "$OUT/"
  # The info-logging run writes a line per call; keep a taste, not megabytes.
  if [ -f "$OUT/log/toolgate-info.log" ]; then
    tail -n 20 "$tmp/log/toolgate-info.log" >"$OUT/log/toolgate-info.log"
  fi
  cat "$OUT/table.md"
  log "tables, raw runs and logs in $OUT"
fi

# --- profile --------------------------------------------------------------

# profile loads NAME with wrk at 32 connections and takes a CPU profile and
# two allocation snapshots from its pprof endpoint at DEBUG.
profile() { # name url script debug-address
  local name=$1 url=$2 script=$3 debug=$4 wrk_pid
  log "profiling $name (32 connections) for ${PPROF_SECONDS}s"
  "${LOAD_PIN[@]}" wrk -t1 -c32 -d"$WARMUP" -s "$tmp/$script" "$url" >/dev/null
  curl -fsS -o "$pdir/$name-allocs-before.pb.gz" "http://$debug/debug/pprof/allocs"
  "${LOAD_PIN[@]}" wrk -t1 -c32 -d"$((PPROF_SECONDS + 2))s" -s "$tmp/$script" "$url" >"$pdir/$name-wrk.txt" 2>&1 &
  wrk_pid=$!
  pids+=("$wrk_pid")
  sleep 1
  curl -fsS -o "$pdir/$name-cpu.pb.gz" "http://$debug/debug/pprof/profile?seconds=$PPROF_SECONDS"
  wait "$wrk_pid" || true
  forget "$wrk_pid"
  curl -fsS -o "$pdir/$name-allocs-after.pb.gz" "http://$debug/debug/pprof/allocs"
}

if [ "$PPROF" = 1 ]; then
  pdir="$OUT/pprof"
  mkdir -p "$pdir"
  port toolgate-pprof
  port toolgate-pprof-admin
  port toolgate-pprof-debug
  port httputil-pprof
  port httputil-pprof-debug
  toolgate_policy "$tmp/toolgate-pprof.yaml" "${PORT[toolgate-pprof]}" "${PORT[toolgate-pprof-admin]}" "${PORT[backend]}"
  tdebug="127.0.0.1:${PORT[toolgate-pprof-debug]}"
  hdebug="127.0.0.1:${PORT[httputil-pprof-debug]}"
  start toolgate-pprof env TOOLGATE_BENCH_PPROF_LISTEN="$tdebug" "$bindir/toolgate-pprof" serve \
    -config "$tmp/toolgate-pprof.yaml" -log-level warn -drain-delay 0 -grace 2s -watch=false
  wait_ready toolgate-pprof "http://127.0.0.1:${PORT[toolgate-pprof-admin]}/readyz"
  wait_ready toolgate-pprof "http://$tdebug/debug/pprof/"
  serve_httputil httputil-pprof backend -pprof "$hdebug"
  wait_ready httputil-pprof "http://$hdebug/debug/pprof/"
  wait_quiet
  profile toolgate "http://127.0.0.1:${PORT[toolgate-pprof]}/v1/tools/search_articles" post.lua "$tdebug"
  wait_quiet
  profile toolgate-mcp "http://127.0.0.1:${PORT[toolgate-pprof]}/mcp" mcp.lua "$tdebug"
  wait_quiet
  profile httputil "http://127.0.0.1:${PORT[httputil-pprof]}$GET_PATH" report.lua "$hdebug"
  cp "$bindir/toolgate-pprof" "$pdir/toolgate"
  cp "$bindir/toolgate-pprof" "$pdir/toolgate-mcp"
  cp "$bindir/reverseproxy" "$pdir/httputil"
  declare -A what=([toolgate]="POST /v1/tools/search_articles" [toolgate-mcp]="MCP tools/call, POST /mcp" [httputil]="GET $GET_PATH")
  {
    for name in toolgate httputil toolgate-mcp; do
      echo
      echo "### $name CPU profile (${what[$name]}, 32 connections, ${PPROF_SECONDS}s; $(awk '/Requests\/sec/ {print $2 " req/s"}' "$pdir/$name-wrk.txt"))"
      echo '```'
      "$GO" tool pprof -top -nodecount=40 "$pdir/$name" "$pdir/$name-cpu.pb.gz" 2>/dev/null
      echo '```'
      echo
      echo "### $name, the same profile by cumulative time"
      echo '```'
      "$GO" tool pprof -top -cum -nodecount=60 "$pdir/$name" "$pdir/$name-cpu.pb.gz" 2>/dev/null | sed -n '/flat%/,$p'
      echo '```'
      echo
      echo "### $name allocations during the profile (alloc_space, then alloc_objects)"
      echo '```'
      "$GO" tool pprof -top -nodecount=25 -sample_index=alloc_space -base "$pdir/$name-allocs-before.pb.gz" "$pdir/$name" "$pdir/$name-allocs-after.pb.gz" 2>/dev/null
      echo
      "$GO" tool pprof -top -nodecount=25 -sample_index=alloc_objects -base "$pdir/$name-allocs-before.pb.gz" "$pdir/$name" "$pdir/$name-allocs-after.pb.gz" 2>/dev/null
      echo '```'
    done
  } | tee "$pdir/top.md"
  log "profiles in $pdir (go tool pprof -http=: $pdir/toolgate $pdir/toolgate-cpu.pb.gz)"
fi
