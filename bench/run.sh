#!/usr/bin/env bash
# bench/run.sh: the side-by-side load benchmark (issue 8).
#
# Builds toolgate, the bundled search backend (bench/backend) and a plain
# httputil.ReverseProxy (bench/reverseproxy), starts them and nginx on
# loopback, and loads each hop with wrk, interleaved over several rounds:
#
#   direct                the backend itself, GET /api/search?q=go&limit=5
#   nginx                 nginx with upstream keep-alive, same GET
#   httputil              the plain Go reverse proxy, same GET
#   toolgate              POST /v1/tools/search_articles {"q":"go","limit":5}
#   toolgate-transparent  toolgate with server.transparent: true, same GET as
#                         the others: the apples-to-apples hop
#   toolgate-info         the POST again, with -log-level info (one log line
#                         per call, written to a file)
#
# toolgate runs the example policy's search tool unchanged (validation, CEL
# rules, zh message templates): that is its whole job, so that is what is
# measured. The server side (backend and the proxy under test) is pinned to
# one CPU and wrk to another. Each run records requests/s, p50 and p99, and
# the CPU the proxy process used per request (utime+stime from
# /proc/<pid>/stat). One markdown table of the medians over rounds is
# printed, with the latency each hop adds over direct and every ratio to
# nginx and to httputil.
#
# Settings (environment):
#   BENCH_ROUNDS=3          rounds; each round runs every variant once per
#                           connection count, in a rotated order
#   BENCH_DURATION=10s      length of one wrk run
#   BENCH_WARMUP=2s         one warm-up run per variant before round 1
#   BENCH_CONNS="1 32"      connection counts
#   BENCH_VARIANTS="direct nginx httputil toolgate toolgate-transparent toolgate-info"
#   BENCH_MAX_OTHER=25      each run waits (up to BENCH_QUIET_WAIT seconds)
#   BENCH_QUIET_WAIT=30     for a second in which other work (a shared
#   BENCH_RETRIES=2         machine) used at most this share (%) of the
#                           server CPU; a run during which more went
#                           elsewhere, or in which requests failed, is run
#                           again, up to BENCH_RETRIES times
#   BENCH_OUT=dir           also keep the table, raw runs and logs there
#                           (default bench/out/<timestamp>, git-ignored)
#   TOOLGATE_BENCH_PPROF=1  after the rounds, profile toolgate under load
#                           (CPU and allocations) and print pprof -top;
#                           with BENCH_ROUNDS=0 it only profiles
#   BENCH_PPROF_SECONDS=15  length of that profile
#
# Every process it starts is stopped by PID on exit; the temp dir is removed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

ROUNDS=${BENCH_ROUNDS:-3}
DURATION=${BENCH_DURATION:-10s}
WARMUP=${BENCH_WARMUP:-2s}
CONNS=${BENCH_CONNS:-1 32}
VARIANTS=${BENCH_VARIANTS:-direct nginx httputil toolgate toolgate-transparent toolgate-info}
MAX_OTHER=${BENCH_MAX_OTHER:-25}
RETRIES=${BENCH_RETRIES:-2}
QUIET_WAIT=${BENCH_QUIET_WAIT:-30}
PPROF=${TOOLGATE_BENCH_PPROF:-0}
PPROF_SECONDS=${BENCH_PPROF_SECONDS:-15}
GO=${GO:-go}
OUT=${BENCH_OUT:-$root/bench/out/$(date -u +%Y%m%dT%H%M%SZ)}

log() { printf 'bench: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

"$root/bench/deps.sh"
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || die "nginx not found"
command -v wrk >/dev/null || die "wrk not found"
command -v curl >/dev/null || die "curl not found"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/toolgate-bench.XXXXXX")
mkdir -p "$tmp/bin" "$tmp/log" "$tmp/nginx/logs" "$OUT"

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

log "building into $tmp/bin"
export CGO_ENABLED=0
"$GO" build -trimpath -o "$tmp/bin/toolgate" ./cmd/toolgate
"$GO" build -trimpath -o "$tmp/bin/backend" ./bench/backend
"$GO" build -trimpath -o "$tmp/bin/reverseproxy" ./bench/reverseproxy
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
  "$GO" build -trimpath -overlay "$tmp/overlay.json" -o "$tmp/bin/toolgate-pprof" ./cmd/toolgate
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
# free_port prints a loopback port nothing listens on (and that this script
# has not handed out yet).
free_port() {
  local p i
  for ((i = 0; i < 200; i++)); do
    p=$((port_base + (RANDOM * 32768 + RANDOM) % port_span))
    [ -z "${taken[$p]:-}" ] || continue
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      taken[$p]=1
      echo "$p"
      return
    fi
  done
  die "no free port found"
}

declare -A PORT=()
for name in backend nginx httputil toolgate toolgate-admin toolgate-transparent toolgate-transparent-admin \
  toolgate-info toolgate-info-admin; do
  PORT[$name]=$(free_port)
done

# --- configs --------------------------------------------------------------

# toolgate_policy writes the example policy with its ports moved to the
# given ones and the search upstream pointed at the bench backend. Every
# substitution is checked, so a changed example fails here, loudly.
toolgate_policy() { # listen admin transparent out
  local listen=$1 admin=$2 transparent=$3 out=$4
  sed -e "s#\"127.0.0.1:8080\"#\"127.0.0.1:$listen\"#" \
    -e "s#\"127.0.0.1:9090\"#\"127.0.0.1:$admin\"#" \
    -e "s#url: http://127.0.0.1:7001\$#url: http://127.0.0.1:${PORT[backend]}#" \
    examples/policy.yaml >"$out"
  grep -q "listen: \"127.0.0.1:$listen\"" "$out" || die "examples/policy.yaml: server.listen not found"
  grep -q "admin_listen: \"127.0.0.1:$admin\"" "$out" || die "examples/policy.yaml: server.admin_listen not found"
  grep -q "url: http://127.0.0.1:${PORT[backend]}\$" "$out" || die "examples/policy.yaml: search upstream url not found"
  if [ "$transparent" = 1 ]; then
    sed -i 's/^server:$/server:\n  transparent: true/' "$out"
    grep -q '^  transparent: true$' "$out" || die "could not set server.transparent"
  fi
  "$tmp/bin/toolgate" check -config "$out" >/dev/null || die "toolgate check $out failed"
}
toolgate_policy "${PORT[toolgate]}" "${PORT[toolgate-admin]}" 0 "$tmp/toolgate.yaml"
toolgate_policy "${PORT[toolgate-transparent]}" "${PORT[toolgate-transparent-admin]}" 1 "$tmp/toolgate-transparent.yaml"
toolgate_policy "${PORT[toolgate-info]}" "${PORT[toolgate-info-admin]}" 0 "$tmp/toolgate-info.yaml"

cat >"$tmp/nginx/nginx.conf" <<EOF
# The reference reverse proxy: one worker, upstream keep-alive, no access log.
worker_processes 1;
daemon off;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/logs/error.log warn;
events {
  worker_connections 1024;
}
http {
  access_log off;
  client_body_temp_path $tmp/nginx/client_body;
  proxy_temp_path $tmp/nginx/proxy;
  fastcgi_temp_path $tmp/nginx/fastcgi;
  uwsgi_temp_path $tmp/nginx/uwsgi;
  scgi_temp_path $tmp/nginx/scgi;
  upstream search {
    server 127.0.0.1:${PORT[backend]};
    keepalive 64;
  }
  server {
    listen 127.0.0.1:${PORT[nginx]};
    location / {
      proxy_pass http://search;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
EOF
"$NGINX" -t -q -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -e "$tmp/nginx/logs/error.log" ||
  die "nginx -t failed"

# wrk scripts: report.lua prints one machine-readable line per run; post.lua
# is the tool call.
cat >"$tmp/report.lua" <<'EOF'
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT requests=%d duration_us=%d p50_us=%.0f p99_us=%.0f errors=%d non2xx=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.timeout, e.status))
end
EOF
{
  cat <<'EOF'
wrk.method = "POST"
wrk.body = '{"q":"go","limit":5}'
wrk.headers["Content-Type"] = "application/json"
EOF
  cat "$tmp/report.lua"
} >"$tmp/post.lua"

# --- processes ------------------------------------------------------------

declare -A PID=()
start() { # name command...
  local name=$1
  shift
  "${SERVER_PIN[@]}" "$@" >"$tmp/log/$name.log" 2>&1 &
  PID[$name]=$!
  pids+=("$!")
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

serve_toolgate() { # name level
  start "$1" "$tmp/bin/toolgate" serve -config "$tmp/$1.yaml" -log-level "$2" -drain-delay 0 -grace 2s -watch=false
  wait_ready "$1" "http://127.0.0.1:${PORT[$1-admin]}/readyz"
}

start backend "$tmp/bin/backend" -listen "127.0.0.1:${PORT[backend]}"
wait_ready backend "http://127.0.0.1:${PORT[backend]}/health"
start nginx "$NGINX" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -e "$tmp/nginx/logs/error.log"
wait_ready nginx "http://127.0.0.1:${PORT[nginx]}/health"
start httputil "$tmp/bin/reverseproxy" -listen "127.0.0.1:${PORT[httputil]}" -upstream "http://127.0.0.1:${PORT[backend]}"
wait_ready httputil "http://127.0.0.1:${PORT[httputil]}/health"
serve_toolgate toolgate warn
serve_toolgate toolgate-transparent warn
serve_toolgate toolgate-info info

# The processes whose CPU counts as the proxy's: nginx's master and its
# worker; otherwise the one process.
nginx_pids=("${PID[nginx]}")
for stat in /proc/[0-9]*/stat; do
  ppid=$(sed 's/.*) //' "$stat" 2>/dev/null | awk '{print $2}') || continue
  [ "$ppid" = "${PID[nginx]}" ] && nginx_pids+=("$(basename "$(dirname "$stat")")")
done
[ ${#nginx_pids[@]} -ge 2 ] || die "no nginx worker found"

GET_PATH="/api/search?q=go&limit=5"
declare -A URL=(
  [direct]="http://127.0.0.1:${PORT[backend]}$GET_PATH"
  [nginx]="http://127.0.0.1:${PORT[nginx]}$GET_PATH"
  [httputil]="http://127.0.0.1:${PORT[httputil]}$GET_PATH"
  [toolgate]="http://127.0.0.1:${PORT[toolgate]}/v1/tools/search_articles"
  [toolgate-transparent]="http://127.0.0.1:${PORT[toolgate-transparent]}$GET_PATH"
  [toolgate-info]="http://127.0.0.1:${PORT[toolgate-info]}/v1/tools/search_articles"
)
declare -A SCRIPT=(
  [direct]=report.lua [nginx]=report.lua [httputil]=report.lua
  [toolgate]=post.lua [toolgate-transparent]=report.lua [toolgate-info]=post.lua
)
proxy_pids() { # variant
  case $1 in
  direct) echo "${PID[backend]}" ;;
  nginx) echo "${nginx_pids[@]}" ;;
  *) echo "${PID[$1]}" ;;
  esac
}

for v in $VARIANTS; do
  [ -n "${URL[$v]:-}" ] || die "unknown variant $v (BENCH_VARIANTS)"
done

# answer makes one request to a hop and prints the body; it fails unless
# the answer is 200 with the search results (toolgate: its ok envelope).
answer() { # variant
  local v=$1 body
  if [ "${SCRIPT[$v]}" = post.lua ]; then
    body=$(curl -fsS -H 'Content-Type: application/json' -d '{"q":"go","limit":5}' "${URL[$v]}") || return 1
  else
    body=$(curl -fsS "${URL[$v]}") || return 1
  fi
  printf '%s\n' "$body"
  case $v in
  toolgate*) [[ $body == *'"status":"ok"'* ]] ;;
  *) [[ $body == *'"results":'* ]] ;;
  esac
}

# Sanity: every hop answers right before anything is timed.
for v in $VARIANTS; do
  answer "$v" >"$tmp/log/sample-$v.json" || die "$v: not a good answer: $(cat "$tmp/log/sample-$v.json")"
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

# server_cpu prints "busy total" clock ticks of the server CPU so far (of all
# CPUs without pinning).
server_cpu() {
  awk -v cpu="cpu$SERVER_CPU" '$1 == cpu { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat
}

# run_wrk prints "rps p50_us p99_us requests errors non2xx proxy_us_per_req
# backend_us_per_req other_pct", where other_pct is the share of the server
# CPU that went to anything but the backend and the proxy under test (other
# tenants of a shared machine, interrupts): the noise of that run.
run_wrk() { # variant conns duration
  local v=$1 c=$2 d=$3 p0 p1 b0 b1 s0 s1 out line
  local -a pp
  read -ra pp <<<"$(proxy_pids "$v")"
  out="$tmp/log/wrk-$v-$c-$(date +%s%N).txt"
  s0=$(server_cpu)
  p0=$(ticks "${pp[@]}")
  b0=$(ticks "${PID[backend]}")
  "${LOAD_PIN[@]}" wrk -t1 -c"$c" -d"$d" --latency -s "$tmp/${SCRIPT[$v]}" "${URL[$v]}" >"$out" 2>&1 ||
    { cat "$out" >&2; die "wrk failed for $v"; }
  p1=$(ticks "${pp[@]}")
  b1=$(ticks "${PID[backend]}")
  s1=$(server_cpu)
  line=$(grep '^RESULT ' "$out") || { cat "$out" >&2; die "no RESULT from wrk for $v"; }
  awk -v v="$v" -v line="$line" -v dp=$((p1 - p0)) -v db=$((b1 - b0)) -v hz="$CLK_TCK" -v s0="$s0" -v s1="$s1" 'BEGIN {
    n = split(line, f, /[ =]/)
    for (i = 2; i < n; i += 2) r[f[i]] = f[i + 1]
    req = r["requests"] > 0 ? r["requests"] : 1
    if (v == "direct") db = 0 # the backend is the process under test; count it once
    split(s0, a, " "); split(s1, b, " ")
    other = b[2] > a[2] ? 100 * ((b[1] - a[1]) - dp - db) / (b[2] - a[2]) : 0
    if (other < 0) other = 0
    printf "%.1f %d %d %d %d %d %.2f %.2f %.1f\n", r["requests"] / (r["duration_us"] / 1e6), r["p50_us"], r["p99_us"],
      r["requests"], r["errors"], r["non2xx"], dp * 1e6 / hz / req, (v == "direct" ? dp : db) * 1e6 / hz / req, other
  }'
}

# --- rounds ---------------------------------------------------------------

read -ra variants <<<"$VARIANTS"
read -ra conns <<<"$CONNS"
raw="$tmp/raw.tsv"
: >"$raw"
if [ "$ROUNDS" -gt 0 ] && [ "$WARMUP" != 0 ] && [ "$WARMUP" != 0s ]; then
  log "warming up each variant for $WARMUP"
  for v in "${variants[@]}"; do run_wrk "$v" 32 "$WARMUP" >/dev/null; done
fi
for ((r = 1; r <= ROUNDS; r++)); do
  for c in "${conns[@]}"; do
    # Rotate the order each round so no variant always follows another.
    n=${#variants[@]}
    for ((k = 0; k < n; k++)); do
      v=${variants[$(((k + r - 1) % n))]}
      # A run is taken again when other work took the server CPU or when
      # requests failed (which on a starved CPU are timeouts, and then
      # toolgate's breaker answering for the backend): neither measures
      # the hop.
      for ((try = 0; ; try++)); do
        wait_quiet
        res=$(run_wrk "$v" "$c" "$DURATION")
        read -r _ _ _ _ errs non2xx _ _ other <<<"$res"
        why=""
        if [ $((errs + non2xx)) -gt 0 ]; then
          why="$((errs + non2xx)) requests failed"
        elif awk -v o="$other" -v m="$MAX_OTHER" 'BEGIN { exit !(o > m) }'; then
          why="${other}% of the server CPU went to other work"
        fi
        if [ -z "$why" ] || [ "$try" -ge "$RETRIES" ]; then
          break
        fi
        log "round $r/$ROUNDS  c=$c  $v: $why; running it again"
        wait_ok "$v"
      done
      printf '%s\t%s\t%s\t%s\n' "$r" "$v" "$c" "${res// /$'\t'}" >>"$raw"
      log "round $r/$ROUNDS  c=$c  $(printf '%-21s' "$v") $res"
    done
  done
done

rss() { awk '/^VmRSS/ {printf "%.1f MiB", $2 / 1024}' "/proc/$1/status"; }

# --- table ----------------------------------------------------------------

# The table: medians over rounds per variant and connection count. Added
# latency is the variant's p50/p99 minus direct's in the same round, then
# the median over rounds, so drift between rounds cancels.
table() {
  awk -F'\t' -v order="$VARIANTS" -v conns="$CONNS" '
  function median(key,   n, i, j, t, a) {
    n = cnt[key]
    for (i = 1; i <= n; i++) a[i] = val[key, i]
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    if (n == 0) return ""
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  function add(key, x) { val[key, ++cnt[key]] = x }
  function ratio(x, y) { return (x == "" || y == "" || y <= 0) ? "n/a" : sprintf("%.2f×", x / y) }
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
    label["direct"] = "direct to backend"; label["nginx"] = "nginx"; label["httputil"] = "httputil.ReverseProxy"
    label["toolgate"] = "toolgate POST /v1/tools"; label["toolgate-transparent"] = "toolgate transparent GET"
    label["toolgate-info"] = "toolgate POST, info logging"
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

if [ "$ROUNDS" -gt 0 ]; then
  {
    echo "## Load benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), kernel $(uname -r)"
    echo "- $("$GO" version | sed 's/^go version //'), $("$NGINX" -v 2>&1 | sed 's/^nginx version: //'), $(wrk -v 2>&1 | head -1 | awk '{print "wrk " $2}')"
    echo "- pinning: $PINNING; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
    awk -F'\t' '{ n++; s[n] = $12 } END {
      for (i = 2; i <= n; i++) { t = s[i]; for (j = i - 1; j >= 1 && s[j] > t; j--) s[j + 1] = s[j]; s[j + 1] = t }
      printf "- CPU time on the server CPU outside the measured processes (other tenants, interrupts) per run: median %.0f %%, max %.0f %%\n",
        n % 2 ? s[(n + 1) / 2] : (s[n / 2] + s[n / 2 + 1]) / 2, s[n] }' "$raw"
    echo "- $ROUNDS interleaved rounds × ${#variants[@]} variants × connections {${CONNS// /, }} × $DURATION; medians over rounds; wrk -t1"
    echo "- response bytes: $(for v in "${variants[@]}"; do printf '%s %s, ' "$v" "$(wc -c <"$tmp/log/sample-$v.json")"; done | sed 's/, $//')"
    echo "- toolgate built from $(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo "an unknown tree")"
    echo "- command: BENCH_ROUNDS=$ROUNDS BENCH_DURATION=$DURATION BENCH_CONNS=\"$CONNS\" bench/run.sh"
    echo
    table
    echo
    echo "Resident memory after the run: $(for v in httputil toolgate toolgate-transparent toolgate-info; do
      [ -n "${PID[$v]:-}" ] && printf '%s %s; ' "$v" "$(rss "${PID[$v]}")"
    done)nginx worker $(rss "${nginx_pids[1]}")."
  } >"$OUT/table.md"
  cp "$raw" "$OUT/raw.tsv"
  cp -r "$tmp/log" "$OUT/"
  # The info-logging run writes a line per call; keep a taste, not megabytes.
  if [ -f "$OUT/log/toolgate-info.log" ]; then
    tail -n 20 "$tmp/log/toolgate-info.log" >"$OUT/log/toolgate-info.log"
fi
cat "$OUT/table.md"
log "table, raw runs and logs in $OUT"
fi

# --- profile --------------------------------------------------------------

if [ "$PPROF" = 1 ]; then
  for name in toolgate-pprof toolgate-pprof-admin toolgate-pprof-debug; do
    PORT[$name]=$(free_port)
  done
  toolgate_policy "${PORT[toolgate-pprof]}" "${PORT[toolgate-pprof-admin]}" 0 "$tmp/toolgate-pprof.yaml"
  debug="127.0.0.1:${PORT[toolgate-pprof-debug]}"
  start toolgate-pprof env TOOLGATE_BENCH_PPROF_LISTEN="$debug" "$tmp/bin/toolgate-pprof" serve \
    -config "$tmp/toolgate-pprof.yaml" -log-level warn -drain-delay 0 -grace 2s -watch=false
  wait_ready toolgate-pprof "http://127.0.0.1:${PORT[toolgate-pprof-admin]}/readyz"
  wait_ready toolgate-pprof "http://$debug/debug/pprof/"
  url="http://127.0.0.1:${PORT[toolgate-pprof]}/v1/tools/search_articles"
  log "profiling toolgate (POST, 32 connections) for ${PPROF_SECONDS}s"
  "${LOAD_PIN[@]}" wrk -t1 -c32 -d"$WARMUP" -s "$tmp/post.lua" "$url" >/dev/null
  pdir="$OUT/pprof"
  mkdir -p "$pdir"
  curl -fsS -o "$pdir/allocs-before.pb.gz" "http://$debug/debug/pprof/allocs"
  "${LOAD_PIN[@]}" wrk -t1 -c32 -d"$((PPROF_SECONDS + 2))s" -s "$tmp/post.lua" "$url" >"$pdir/wrk.txt" 2>&1 &
  wrk_pid=$!
  pids+=("$wrk_pid")
  sleep 1
  curl -fsS -o "$pdir/cpu.pb.gz" "http://$debug/debug/pprof/profile?seconds=$PPROF_SECONDS"
  wait "$wrk_pid" || true
  forget "$wrk_pid"
  curl -fsS -o "$pdir/allocs-after.pb.gz" "http://$debug/debug/pprof/allocs"
  cp "$tmp/bin/toolgate-pprof" "$pdir/toolgate"
  {
  echo
  echo "### toolgate CPU profile (POST /v1/tools/search_articles, 32 connections, ${PPROF_SECONDS}s)"
  echo '```'
  "$GO" tool pprof -top -nodecount=40 "$pdir/toolgate" "$pdir/cpu.pb.gz" 2>/dev/null
  echo '```'
  echo
  echo "### the same profile by cumulative time"
  echo '```'
  "$GO" tool pprof -top -cum -nodecount=60 "$pdir/toolgate" "$pdir/cpu.pb.gz" 2>/dev/null | sed -n '/flat%/,$p'
  echo '```'
  echo
  echo "### toolgate allocations during the profile (alloc_space, then alloc_objects)"
  echo '```'
  "$GO" tool pprof -top -nodecount=25 -sample_index=alloc_space -base "$pdir/allocs-before.pb.gz" "$pdir/toolgate" "$pdir/allocs-after.pb.gz" 2>/dev/null
  echo
  "$GO" tool pprof -top -nodecount=25 -sample_index=alloc_objects -base "$pdir/allocs-before.pb.gz" "$pdir/toolgate" "$pdir/allocs-after.pb.gz" 2>/dev/null
  echo '```'
  } | tee "$pdir/top.md"
  log "profiles in $pdir (go tool pprof -http=: $pdir/toolgate $pdir/cpu.pb.gz)"
fi
