#!/usr/bin/env bash
# One shoal-node beside nginx on the same bytes and the same origin, in one run.
# Each server is pinned to core $SERVICE_CPUS (0) and its client (s3_load, $CONC
# connections of 1 MiB ranged GETs) to $READER_CPUS (1), as if they were other
# hosts; each pass prints MB/s and the server's CPU milliseconds per GiB served
# (user + system of all its processes, /proc/PID/stat), a figure that does not
# depend on what else runs.
#
# - cold: every block once, the first time it is asked for: a node in front of
#   the origin, against nginx as a caching proxy (proxy_cache, slice 1m,
#   proxy_cache_lock) in front of the same origin. Twice each: a first object
#   while the caches fill (a node's RAM tier takes fresh memory, which the
#   kernel zeroes), then a second while they are full (a node's evicted blocks'
#   buffers take the new ones, as on a node that has run for a while).
# - warm: a node answering from its RAM tier, against nginx serving the file
#   itself from the page cache with sendfile (and the warm caching proxy).
# - the test origin (in-memory s3s) read directly, for reference.
#
# The origin of the cold passes is nginx serving the file with sendfile (its
# own CPU is not counted); a node signs its requests, which nginx ignores.
# With BASELINE_REV (a git revision: its shoal-node, built once into
# target/baseline-REV), a second node of that build serves the same passes
# beside this tree's: cold with its RAM tier full, then warm, ROUNDS (3) rounds
# in turns, best of each; the ratios are this tree's over the baseline's.
# Knobs: SIZE_MB (1024), SECONDS_EACH (5), CONC (8), BASELINE_REV, ROUNDS (3).
source "$(dirname "$0")/lib.sh"
SIZE_MB=${SIZE_MB:-1024}
SECONDS_EACH=${SECONDS_EACH:-5}
CONC=${CONC:-8}
SERVICE_CPUS=${SERVICE_CPUS:-0}
READER_CPUS=${READER_CPUS:-1}
export ORIGIN_CPUS=$SERVICE_CPUS NODE_CPUS=$SERVICE_CPUS

command -v nginx >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null; }
build
steady_memory
size=$((SIZE_MB * 1024 * 1024))
mkdir -p "$work/seed" "$work/static/bench"
head -c "${SIZE_MB}M" /dev/urandom >"$work/seed/obj.bin"
head -c "${SIZE_MB}M" /dev/urandom >"$work/static/bench/fill.bin"
cp "$work/seed/obj.bin" "$work/static/bench/obj.bin"
# The test origin (the reference pass), with the same object.
start_origin "$work/seed"
test_origin=$origin

# nginx_conf NAME PORT BODY: an nginx of its own (one worker, like one node).
nginx_conf() {
  mkdir -p "$work/$1/cache"
  cat >"$work/$1/nginx.conf" <<CONF
user root;
worker_processes 1;
pid $work/$1/nginx.pid;
error_log $work/$1/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 100000;
  $3
}
CONF
  taskset -c "$SERVICE_CPUS" nginx -c "$work/$1/nginx.conf" -g 'daemon off;' &
  pids+=($!)
  for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$2/" && return 0; sleep 0.1; done
  echo "nginx $1 did not come up" >&2; exit 1
}
# nginx_pids NAME: the master and its workers.
nginx_pids() {
  local master
  master=$(cat "$work/$1/nginx.pid")
  echo "$master $(pgrep -P "$master" | tr '\n' ' ')"
}

# The origin: the file as it is, from the page cache.
sport=$(free_port)
nginx_conf static "$sport" "server { listen 127.0.0.1:$sport; root $work/static; }"
cat "$work/static/bench/obj.bin" "$work/static/bench/fill.bin" >/dev/null
origin="127.0.0.1:$sport"
# A caching proxy in front of it.
pport=$(free_port)
nginx_conf proxy "$pport" "
  proxy_cache_path $work/proxy/cache levels=1:2 keys_zone=shoal:32m max_size=8g inactive=1h use_temp_path=off;
  upstream origin { server $origin; keepalive 32; }
  server {
    listen 127.0.0.1:$pport;
    location / {
      slice 1m;
      proxy_cache shoal;
      proxy_cache_key \$uri\$slice_range;
      proxy_set_header Range \$slice_range;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
      proxy_cache_valid 200 206 1h;
      proxy_cache_lock on;
      proxy_pass http://origin;
    }
  }"
# The node, in front of the same origin: a RAM tier that holds one object whole
# (the warm pass's), not two.
NODE_RAM="$((SIZE_MB + 128))MiB" start_node n1
shoal=$node
BASELINE_REV=${BASELINE_REV:-}
ROUNDS=${ROUNDS:-3}
if [ -n "$BASELINE_REV" ]; then
  NODE_BIN=$(build_baseline "$BASELINE_REV" shoal-node) NODE_RAM="$((SIZE_MB + 128))MiB" start_node n0
  base=$node
fi

# pass NAME ENDPOINT PIDS FLAGS...: one s3_load pass over $KEY (obj.bin);
# prints "MB/s ms-per-GiB".
pass() {
  local name=$1 ep=$2 pids_of=$3 out t0 t1 bytes mbs; shift 3
  out="$work/$name.out"
  prefault $((SIZE_MB * 2))
  t0=$(cpu_ticks $pids_of)
  SHOAL_LOAD_ACCESS_KEY=${LOAD_KEY:-$NODE_KEY} SHOAL_LOAD_SECRET_KEY=${LOAD_SECRET:-$NODE_SECRET} \
    taskset -c "$READER_CPUS" "$bin/examples/s3_load" --endpoint "http://$ep" --bucket bench --key "${KEY:-obj.bin}" \
    --size "$size" --concurrency "$CONC" "$@" >"$out"
  t1=$(cpu_ticks $pids_of)
  grep -q 'errors=0 ' "$out" || { echo "$name: requests failed: $(cat "$out")" >&2; exit 1; }
  bytes=$(sed -n 's/.*bytes=\([0-9]*\).*/\1/p' "$out")
  mbs=$(sed -n 's/^MB\/s=\([0-9.]*\).*/\1/p' "$out")
  echo "$mbs $(ms_per_gib $((t1 - t0)) "$bytes")"
}
# Each pass runs in a subshell: one that failed leaves its figures empty.
check() { local v; for v in "$@"; do [ -n "$v" ] || { echo "a pass failed (see above)" >&2; exit 1; }; done; }

node_pid=${node_pids[0]}
read -r node_fill node_fill_cpu <<<"$(KEY=fill.bin pass node-fill "$shoal" "$node_pid" --once)"
read -r proxy_fill proxy_fill_cpu <<<"$(KEY=fill.bin pass proxy-fill "127.0.0.1:$pport" "$(nginx_pids proxy)" --once)"
read -r node_cold node_cold_cpu <<<"$(pass node-cold "$shoal" "$node_pid" --once)"
read -r proxy_cold proxy_cold_cpu <<<"$(pass proxy-cold "127.0.0.1:$pport" "$(nginx_pids proxy)" --once)"
read -r node_warm node_warm_cpu <<<"$(pass node-warm "$shoal" "$node_pid" --seconds "$SECONDS_EACH")"
read -r static_warm static_warm_cpu <<<"$(pass static-warm "$origin" "$(nginx_pids static)" --seconds "$SECONDS_EACH")"
read -r proxy_warm proxy_warm_cpu <<<"$(pass proxy-warm "127.0.0.1:$pport" "$(nginx_pids proxy)" --seconds "$SECONDS_EACH")"
read -r direct direct_cpu <<<"$(LOAD_KEY=$ORIGIN_KEY LOAD_SECRET=$SHOAL_ORIGIN_SECRET_KEY \
  pass direct "$test_origin" "${pids[0]}" --seconds "$SECONDS_EACH")"
check "$node_fill" "$proxy_fill" "$node_cold" "$proxy_cold" "$node_warm" "$static_warm" "$proxy_warm" "$direct"

# best A B: the better of two "MB/s ms-per-GiB" pairs (most MB/s, least CPU).
best() { awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " ");
  if (a == "") { print b; exit } printf "%s %s\n", (x[1] > y[1] ? x[1] : y[1]), (x[2] < y[2] ? x[2] : y[2]) }'; }
if [ -n "$BASELINE_REV" ]; then
  base_pid=${node_pids[1]}
  read -r base_fill base_fill_cpu <<<"$(KEY=fill.bin pass base-fill "$base" "$base_pid" --once)"
  read -r base_cold base_cold_cpu <<<"$(pass base-cold "$base" "$base_pid" --once)"
  check "$base_fill" "$base_cold"
  this="" that=""
  for _ in $(seq "$ROUNDS"); do
    r=$(pass node-warm "$shoal" "$node_pid" --seconds "$SECONDS_EACH"); check "$r"; this=$(best "$this" "$r")
    r=$(pass base-warm "$base" "$base_pid" --seconds "$SECONDS_EACH"); check "$r"; that=$(best "$that" "$r")
  done
  read -r node_best node_best_cpu <<<"$this"
  read -r base_warm base_warm_cpu <<<"$that"
fi

echo "node: 1 MiB ranged GETs, $CONC connections, ${SIZE_MB} MiB object; servers on core $SERVICE_CPUS, clients on core $READER_CPUS"
printf '%-44s %10s %16s\n' "server" "MB/s" "CPU ms per GiB"
printf '%-44s %10s %16s\n' "shoal-node, cold, RAM tier filling" "$node_fill" "$node_fill_cpu"
printf '%-44s %10s %16s\n' "nginx proxy_cache + slice 1m, cold, filling" "$proxy_fill" "$proxy_fill_cpu"
printf '%-44s %10s %16s\n' "shoal-node, cold, RAM tier full" "$node_cold" "$node_cold_cpu"
printf '%-44s %10s %16s\n' "nginx proxy_cache + slice 1m, cold, second" "$proxy_cold" "$proxy_cold_cpu"
printf '%-44s %10s %16s\n' "shoal-node, warm (RAM tier)" "$node_warm" "$node_warm_cpu"
printf '%-44s %10s %16s\n' "nginx sendfile (the file, page cache)" "$static_warm" "$static_warm_cpu"
printf '%-44s %10s %16s\n' "nginx proxy_cache + slice 1m, warm" "$proxy_warm" "$proxy_warm_cpu"
printf '%-44s %10s %16s\n' "test origin read directly (in-memory s3s)" "$direct" "$direct_cpu"
printf '%-60s %10s %10s\n' "ratio" "value" "target"
printf '%-60s %10s %10s\n' "cold CPU per GiB, filling: node / nginx proxy_cache + slice" "$(ratio "$node_fill_cpu" "$proxy_fill_cpu")" ""
printf '%-60s %10s %10s\n' "cold CPU per GiB, full: node / nginx proxy_cache + slice" "$(ratio "$node_cold_cpu" "$proxy_cold_cpu")" "<= 1"
printf '%-60s %10s %10s\n' "warm CPU per GiB: node / nginx sendfile" "$(ratio "$node_warm_cpu" "$static_warm_cpu")" "<= 1.2"
printf '%-60s %10s %10s\n' "warm MB/s: node / nginx sendfile" "$(ratio "$node_warm" "$static_warm")" ""
printf '%-60s %10s %10s\n' "warm MB/s: node / nginx proxy_cache + slice" "$(ratio "$node_warm" "$proxy_warm")" ""
if [ -n "$BASELINE_REV" ]; then
  echo
  echo "this tree's node against $BASELINE_REV's (warm: best of $ROUNDS rounds in turns)"
  printf '%-44s %10s %16s\n' "pass" "MB/s ratio" "CPU/GiB ratio"
  printf '%-44s %10s %16s\n' "cold, RAM tier full ($node_cold vs $base_cold MB/s)" \
    "$(ratio "$node_cold" "$base_cold")" "$(ratio "$node_cold_cpu" "$base_cold_cpu")"
  printf '%-44s %10s %16s\n' "warm ($node_best vs $base_warm MB/s)" \
    "$(ratio "$node_best" "$base_warm")" "$(ratio "$node_best_cpu" "$base_warm_cpu")"
  echo "CPU ms per GiB, warm: this tree $node_best_cpu, baseline $base_warm_cpu; cold: $node_cold_cpu, $base_cold_cpu"
fi
