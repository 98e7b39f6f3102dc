#!/usr/bin/env bash
# What a node asks of its origin, in one run.
#
# 1. A byte budget: one node with [origin] max_bytes_per_second = $BUDGET_MIB MiB/s
#    (far below what the test origin sends), a reader of cold 1 MiB blocks of one
#    object (s3_load --once, 2 at a time) alone, then the same reader of another
#    object while `shoal warm` fetches $WARM_MIB MiB: the reader's p99 block time
#    with the warm over without it, and the origin's busiest 5 s over the budget.
# 2. A throttling origin: 8 concurrent cats of 32 MiB files through a mount over
#    one node, the origin answering 30% and then 60% of requests `503 SlowDown`:
#    files read whole, and the requests the origin saw. With BASELINE_REV (a
#    revision, say 39048396), that revision's node and mount read the same files
#    first (built once into target/baseline-REV), for the before and after.
#
# Services on $NODE_CPUS (0), readers on $READER_CPUS (1). ONLY=mount runs part 2 only.
source "$(dirname "$0")/lib.sh"
BUDGET_MIB=${BUDGET_MIB:-100}
WARM_MIB=${WARM_MIB:-1024}
NODE_CPUS=${NODE_CPUS:-0}
READER_CPUS=${READER_CPUS:-1}
ORIGIN_CPUS=$NODE_CPUS
build

mkdir -p "$work/seed/warm" "$work/seed/read" "$work/seed/big"
for i in $(seq 1 $((WARM_MIB / 64))); do head -c 64M /dev/urandom >"$work/seed/warm/w$i.bin"; done
head -c 256M /dev/urandom >"$work/seed/read/alone.bin"
cp "$work/seed/read/alone.bin" "$work/seed/read/beside.bin"
for i in 1 2 3 4 5 6 7 8; do head -c 32M /dev/urandom >"$work/seed/big/b$i.bin"; done
start_origin "$work/seed"

stats() { curl -sf "http://$origin/_origin/stats"; }
reset_stats() { curl -sf -X POST "http://$origin/_origin/stats/reset" >/dev/null; }
faults() { curl -sf -X PUT --data "$1" "http://$origin/_origin/faults" >/dev/null; }

# node_toml PORT [ORIGIN_KEYS]: a node's config on PORT with a 4 GiB RAM tier.
node_toml() {
  cat <<TOML
[origin]
endpoint = "http://$origin"
${2:-}
[origin.credentials]
access_key_id = "$ORIGIN_KEY"
secret_access_key_env = "SHOAL_ORIGIN_SECRET_KEY"
[node]
listen = "127.0.0.1:$1"
[cache]
ram_size = "4GiB"
[auth]
[[auth.keys]]
access_key_id = "$NODE_KEY"
secret_access_key = "$NODE_SECRET"
TOML
}
# run_node BIN_DIR NAME PORT [ORIGIN_KEYS]: starts a node; sets $node and $npid.
run_node() {
  node_toml "$3" "${4:-}" >"$work/$2.toml"
  taskset -c "$NODE_CPUS" env RUST_LOG=warn "$1/shoal-node" --config "$work/$2.toml" 2>"$work/$2.log" &
  npid=$!; pids+=($npid)
  node="127.0.0.1:$3"
  for _ in $(seq 200); do curl -sf "http://$node/healthz" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "node $2 did not start" >&2; exit 1
}
# cli_toml NODE: the origin and a cluster of NODE, for `shoal` and mounts.
cli_toml() {
  cat <<TOML
[origin]
endpoint = "http://$origin"
[origin.credentials]
access_key_id = "$ORIGIN_KEY"
secret_access_key_env = "SHOAL_ORIGIN_SECRET_KEY"
[cluster]
nodes = ["$1"]
[cluster.credentials]
access_key_id = "$NODE_KEY"
secret_access_key = "$NODE_SECRET"
TOML
}

# ---- 1. byte budget: a warm beside a reader
if [ "${ONLY:-}" != mount ]; then
run_node "$bin" budget "$(free_port)" "max_bytes_per_second = \"${BUDGET_MIB}MiB\""

reader() {
  SHOAL_LOAD_ACCESS_KEY=$NODE_KEY SHOAL_LOAD_SECRET_KEY=$NODE_SECRET taskset -c "$READER_CPUS" \
    "$bin/examples/s3_load" --endpoint "http://$node" --bucket bench --key "$1" \
    --size $((256 << 20)) --concurrency 2 --once
}
p99() { sed -n 's/.*p99_ms=\([0-9.]*\).*/\1/p' <<<"$1"; }
mbs() { sed -n 's/^MB\/s=\([0-9.]*\).*/\1/p' <<<"$1"; }

alone=$(reader read/alone.bin)
cli_toml "$node" >"$work/cli.toml"
reset_stats
t0=$(date +%s.%N)
taskset -c "$READER_CPUS" "$bin/shoal" --config "$work/cli.toml" warm "s3://bench/warm/" >"$work/warm.out" 2>&1 &
warm_pid=$!
sleep 2
beside=$(reader read/beside.bin)
wait "$warm_pid" || { echo "shoal warm failed:"; cat "$work/warm.out"; exit 1; }
t1=$(date +%s.%N)
window=$(stats | python3 -c '
import json, sys
s = json.load(sys.stdin)
t = [k["bytes"] for k in s["timeline"]]
n = 50  # ticks of 100 ms: 5 s
print(max(sum(t[i:i + n]) for i in range(max(1, len(t) - n + 1))) / 5 / 2**20)')
budget_metrics=$(curl -sf "http://$node/metrics" | grep '^shoal_node_origin_budget_bytes_total' | tr '\n' ' ')

echo "== byte budget: ${BUDGET_MIB} MiB/s, shoal warm of ${WARM_MIB} MiB beside a reader of 256 MiB cold (1 MiB blocks, 2 at a time)"
printf '%-34s %10s %10s\n' "reader" "MB/s" "p99 ms"
printf '%-34s %10s %10s\n' "alone" "$(mbs "$alone")" "$(p99 "$alone")"
printf '%-34s %10s %10s\n' "beside the warm" "$(mbs "$beside")" "$(p99 "$beside")"
echo "reader p99 beside the warm / alone: $(ratio "$(p99 "$beside")" "$(p99 "$alone")")x (at most 2x wanted)"
echo "warm + reader took $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s; $(tail -n 3 "$work/warm.out" | head -n 1)"
echo "origin's busiest 5 s: $(printf '%.1f' "$window") MiB/s = $(ratio "$window" "$BUDGET_MIB")x the budget (at most 1.05x wanted)"
echo "node's budget: $budget_metrics"
fi

# ---- 2. a throttling origin under a mount
# sum_of ADDR METRIC: the sum of METRIC's samples on ADDR's /metrics ("-" if none).
sum_of() {
  curl -sf "http://$1/metrics" | awk -v m="$2" '$1 == m || index($1, m "{") == 1 { s += $2; n++ } END { if (n) printf "%d", s; else print "-" }'
}
mount_read() { # BIN_DIR NAME PER_MILLE: prints what the origin saw
  local bdir=$1 name=$2 pm=$3 m t0 t1 whole=0 i readers=()
  run_node "$bdir" "$name" "$(free_port)"
  cli_toml "$node" >"$work/$name-mount.toml"
  printf '[cache]\nram_size = "256MiB"\n' >>"$work/$name-mount.toml"
  m="$work/mnt-$name"; mkdir -p "$m"
  mport=$(free_port)
  taskset -c "$NODE_CPUS" "$bdir/shoal-mount" --config "$work/$name-mount.toml" --log-file "$work/$name-mount.log" \
    --metrics-addr "127.0.0.1:$mport" bench "$m"
  mounts+=("$m"); wait_mounted "$m"
  ls "$m/big" >/dev/null
  reset_stats
  faults "{\"slowdown_per_mille\": $pm}"
  t0=$(date +%s.%N)
  for i in 1 2 3 4 5 6 7 8; do
    (taskset -c "$READER_CPUS" cmp -s "$m/big/b$i.bin" "$work/seed/big/b$i.bin" && echo ok || echo bad) >"$work/$name.$i" &
    readers+=($!)
  done
  wait "${readers[@]}"
  t1=$(date +%s.%N)
  faults '{}'
  for i in 1 2 3 4 5 6 7 8; do [ "$(cat "$work/$name.$i")" = ok ] && whole=$((whole + 1)); done
  stats | python3 -c '
import json, sys
s = json.load(sys.stdin)
r = sum(k["requests"] for k in s["timeline"]); t = sum(k["throttled"] for k in s["timeline"])
print(f"{sys.argv[1]} of 8 read whole in {float(sys.argv[3]) - float(sys.argv[2]):.1f} s; origin requests {r}, of them {t} SlowDown")' "$whole" "$t0" "$t1"
  echo "    mount: $(sum_of "127.0.0.1:$mport" shoal_client_fallbacks_total) blocks from the origin itself, $(sum_of "127.0.0.1:$mport" shoal_mount_origin_budget_throttles_total) throttles seen; node: $(sum_of "$node" shoal_node_origin_budget_throttles_total) throttles seen, $(sum_of "$node" shoal_node_origin_budget_decreases_total) decreases"
  fusermount3 -u "$m" 2>/dev/null || umount -l "$m"
  kill "$npid" 2>/dev/null || true
}

echo
echo "== a mount's 8 concurrent reads of 32 MiB, the origin answering a share of requests 503 SlowDown"
printf '%-22s %6s  %s\n' "build" "share" "result"
if [ -n "${BASELINE_REV:-}" ]; then
  base_node=$(build_baseline "$BASELINE_REV" shoal-node)
  base_mount=$(build_baseline "$BASELINE_REV" shoal-mount)
  [ "$(dirname "$base_node")" = "$(dirname "$base_mount")" ] || { echo "baseline binaries apart"; exit 1; }
  for pm in 300 600; do
    printf '%-22s %5s%%  %s\n' "$BASELINE_REV" $((pm / 10)) "$(mount_read "$(dirname "$base_node")" "base$pm" "$pm")"
  done
fi
for pm in 300 600; do
  printf '%-22s %5s%%  %s\n' "this tree" $((pm / 10)) "$(mount_read "$bin" "this$pm" "$pm")"
done
echo "(8 x 32 MiB at 1 MiB blocks is 256 block GETs; requests beyond that and the throttled ones are what throttling cost)"
