#!/usr/bin/env bash
# Analytics over Parquet, in one run: DuckDB's three kinds of query (one row
# range, three small columns of every row, the big column whole) over FILES
# Parquet files (row groups of ROWS rows, six columns, one of them a 64-byte
# string) on local disk, through a cold shoal mount (cold nodes), through a
# second mount on the warm nodes, and through mountpoint-s3; pyarrow's own S3
# filesystem (no mount) through a node (cold, then warm) and straight to the
# origin as further rows, and DuckDB over `shoal://` (the Python package, no
# mount) on cold nodes, then from a fresh process on the warm ones. Each query's answer must equal its answer on local
# disk; the bytes a query reads are its `rchar` on local disk, and each way's
# cost is the origin's body bytes it caused, over those.
#
# The origin answers LATENCY_MS late and BW bytes/s per connection. Services
# (origin, 3 nodes) on core 0, every mount daemon and the queries on core 1; page
# cache dropped before every query. Each cold row reads a copy of the data that
# nothing has read before.
# Knobs: FILES (4), ROW_GROUPS (9 per file), ROWS (131072 per group), LATENCY_MS (20),
# BW (100000000), MOUNT_S3 (path of a mountpoint-s3 build; default
# ../shared/peers/mount-s3).
source "$(dirname "$0")/lib.sh"
SERVICE_CPUS=${SERVICE_CPUS:-0}
export ORIGIN_CPUS=$SERVICE_CPUS NODE_CPUS=$SERVICE_CPUS READER_CPUS=${READER_CPUS:-1}
pin() { taskset -c "$READER_CPUS" "$@"; }
FILES=${FILES:-4}
ROW_GROUPS=${ROW_GROUPS:-9}
ROWS=${ROWS:-131072}
LATENCY_MS=${LATENCY_MS:-20}
BW=${BW:-100000000}
MOUNT_S3=${MOUNT_S3:-$root/../shared/peers/mount-s3}
PY=$root/bench/analytics.py
QUERIES=(rows columns full)

command -v fusermount3 >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 >/dev/null; }
python3 -c 'import duckdb, pyarrow' 2>/dev/null || pip install -q --break-system-packages duckdb pyarrow
python3 -c 'import shoal.fs' 2>/dev/null || python3 -m pip install --quiet "$root/python"
have_ms3=0
if [ -x "$MOUNT_S3" ]; then
  [ -e /usr/lib/x86_64-linux-gnu/libfuse.so.2 ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfuse2 >/dev/null; }
  have_ms3=1
fi
build
steady_memory

echo "writing $FILES Parquet files of $ROW_GROUPS row groups of $ROWS rows" >&2
python3 "$PY" write "$work/local" "$FILES" "$ROW_GROUPS" "$ROWS"
data_bytes=$(du -cb "$work"/local/*.parquet | awk 'END { print $1 }')
# One copy per cold read (hard links: the origin loads each as an object of its own).
mkdir -p "$work/seed"
for c in direct "${QUERIES[@]/#/shoal-}" "${QUERIES[@]/#/node-}" "${QUERIES[@]/#/py-}"; do cp -al "$work/local" "$work/seed/$c"; done
export PREFAULT_MB=$(( data_bytes / 1048576 + 256 ))
start_slow_cluster 256MiB

mkdir -p "$work/cold" "$work/warm"
pin "$bin/shoal-mount" --config "$work/cluster.toml" --log-file "$work/cold.log" bench "$work/cold"
mounts+=("$work/cold")
if [ "$have_ms3" = 1 ]; then
  mkdir -p "$work/ms3"
  AWS_ACCESS_KEY_ID=$ORIGIN_KEY AWS_SECRET_ACCESS_KEY=$SHOAL_ORIGIN_SECRET_KEY pin "$MOUNT_S3" bench "$work/ms3" \
    --endpoint-url "http://$origin" --force-path-style --region us-east-1 >"$work/ms3.log" 2>&1 && mounts+=("$work/ms3")
  wait_mounted "$work/ms3" || have_ms3=0
fi

# sent: the origin's body bytes and object GETs so far ("BYTES GETS"), once it
# has stopped sending (read-ahead still in flight when a query returns is that
# query's cost too).
origin_stats() {
  curl -s "http://$origin/_origin/stats" | python3 -c 'import json,sys
s = json.load(sys.stdin)
print(s["body_bytes_sent"], sum(r["count"] for r in s["requests"] if r["method"] == "GET" and r["key"]))'
}
sent() {
  local a b
  b=$(origin_stats)
  while :; do
    sleep 0.3
    a=$b
    b=$(origin_stats)
    [ "$a" = "$b" ] && break
  done
  echo "$b"
}
field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read())[\"$1\"])"; }

# measure NAME CMD...: runs one query (page cache dropped) and records its
# seconds, origin bytes and answer as NAME's; the answer must be its engine's
# answer on local disk (a query through a mount that answers wrong stops the bench).
declare -A secs_of bytes_of gets_of rchar_of answer_of
measure() {
  local name=$1 out b0 g0 b1 g1; shift
  drop_cache
  read -r b0 g0 <<<"$(sent)"
  out=$("$@") || { echo "query $name failed" >&2; exit 1; }
  read -r b1 g1 <<<"$(sent)"
  secs_of[$name]=$(field seconds <<<"$out")
  bytes_of[$name]=$((b1 - b0))
  gets_of[$name]=$((g1 - g0))
  rchar_of[$name]=$(field rchar <<<"$out")
  answer_of[$name]=$(python3 -c 'import json,sys; print(json.dumps(json.loads(sys.stdin.read())["answer"]))' <<<"$out")
}
check() { # NAME LOCAL
  [ "${answer_of[$1]}" = "${answer_of[$2]}" ] || {
    echo "wrong answer: $1 gave ${answer_of[$1]}, local disk ${answer_of[$2]}" >&2; exit 1; }
}

node_s3() { # QUERY PREFIX
  AWS_ACCESS_KEY_ID=$NODE_KEY AWS_SECRET_ACCESS_KEY=$NODE_SECRET pin python3 "$PY" s3 "$1" "http://${node_addrs[0]}" bench "$2"
}
origin_s3() { # QUERY PREFIX
  AWS_ACCESS_KEY_ID=$ORIGIN_KEY AWS_SECRET_ACCESS_KEY=$SHOAL_ORIGIN_SECRET_KEY pin python3 "$PY" s3 "$1" "http://$origin" bench "$2"
}

for q in "${QUERIES[@]}"; do
  echo "query $q" >&2
  measure "local/$q" pin python3 "$PY" query duckdb "$q" "$work/local"
  measure "local-pa/$q" pin python3 "$PY" query pyarrow "$q" "$work/local"
  measure "cold/$q" pin python3 "$PY" query duckdb "$q" "$work/cold/shoal-$q"; check "cold/$q" "local/$q"
  if [ "$have_ms3" = 1 ]; then
    measure "ms3/$q" pin python3 "$PY" query duckdb "$q" "$work/ms3/direct"; check "ms3/$q" "local/$q"
  fi
  measure "node-cold/$q" node_s3 "$q" "node-$q"; check "node-cold/$q" "local-pa/$q"
  measure "origin-s3/$q" origin_s3 "$q" direct; check "origin-s3/$q" "local-pa/$q"
done
# A second mount, its own tiers empty, on the nodes the cold queries filled.
pin "$bin/shoal-mount" --config "$work/cluster.toml" --log-file "$work/warm.log" bench "$work/warm"
mounts+=("$work/warm")
for q in "${QUERIES[@]}"; do
  measure "warm/$q" pin python3 "$PY" query duckdb "$q" "$work/warm/shoal-$q"; check "warm/$q" "local/$q"
  measure "node-warm/$q" node_s3 "$q" "node-$q"; check "node-warm/$q" "local-pa/$q"
done
# shoal:// (no mount) last, so that its cold data evicts nothing the rows above
# read warm: cold, then from a fresh process (its own RAM empty) on warm nodes.
for q in "${QUERIES[@]}"; do
  measure "py-cold/$q" pin python3 "$PY" shoal "$q" "$work/cluster.toml" bench "py-$q"; check "py-cold/$q" "local/$q"
  measure "py-warm/$q" pin python3 "$PY" shoal "$q" "$work/cluster.toml" bench "py-$q"; check "py-warm/$q" "local/$q"
done

cost() { # NAME BASE: origin bytes of NAME over the bytes BASE read locally
  ratio "${bytes_of[$1]}" "${rchar_of[$2]}"
}
mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1e6 }'; }
echo "analytics: $FILES Parquet files, $(mb "$data_bytes") MB, row groups of $ROWS rows; origin +${LATENCY_MS} ms first byte, $((BW / 1000000)) MB/s per connection; DuckDB (2 threads) on core $READER_CPUS with the mounts, services on core $SERVICE_CPUS"
printf '%-8s %9s %10s %9s %10s %12s %9s %10s %11s %10s %11s %10s\n' query "read MB" "local s" "cold s" "cold cost" "mount-s3 s" "its cost" "warm s" "warm GETs" "node cold" "node warm" "origin s3"
for q in "${QUERIES[@]}"; do
  printf '%-8s %9s %10s %9s %9sx %12s %8sx %10s %11s %10s %11s %10s\n' "$q" "$(mb "${rchar_of[local/$q]}")" "${secs_of[local/$q]}" \
    "${secs_of[cold/$q]}" "$(cost "cold/$q" "local/$q")" "${secs_of[ms3/$q]:-n/a}" \
    "$( [ "$have_ms3" = 1 ] && cost "ms3/$q" "local/$q" || echo n/a)" "${secs_of[warm/$q]}" "${gets_of[warm/$q]}" \
    "${secs_of[node-cold/$q]}" "${secs_of[node-warm/$q]}" "${secs_of[origin-s3/$q]}"
done
echo "pyarrow's S3 filesystem: through a node cold, origin bytes / pyarrow's local read: rows $(cost node-cold/rows local-pa/rows)x, columns $(cost node-cold/columns local-pa/columns)x, full $(cost node-cold/full local-pa/full)x; straight to the origin: rows $(cost origin-s3/rows local-pa/rows)x, columns $(cost origin-s3/columns local-pa/columns)x, full $(cost origin-s3/full local-pa/full)x; warm through the node: ${gets_of[node-warm/rows]} / ${gets_of[node-warm/columns]} / ${gets_of[node-warm/full]} object GETs at the origin"
row() { printf '%-60s %10s %10s\n' "$1" "$2" "$3"; }
printf '%-60s %10s %10s\n' "ratio" "value" "target"
row "cold origin bytes / bytes read: row range" "$(cost cold/rows local/rows)" "<= 1.5"
row "cold origin bytes / bytes read: three columns" "$(cost cold/columns local/columns)" "<= 1.5"
row "cold origin bytes / bytes read: full column" "$(cost cold/full local/full)" "<= 1.1"
for q in "${QUERIES[@]}"; do
  row "cold time: shoal / mountpoint-s3, $q" "$(ratio "${secs_of[cold/$q]}" "${secs_of[ms3/$q]:-0}")" "<= 1"
done
row "warm time: shoal / local disk, three columns" "$(ratio "${secs_of[warm/columns]}" "${secs_of[local/columns]}")" "<= 3"
row "warm time: shoal / local disk, full column" "$(ratio "${secs_of[warm/full]}" "${secs_of[local/full]}")" "<= 3"
row "warm: object GETs at the origin (all three queries)" "$(( ${gets_of[warm/rows]} + ${gets_of[warm/columns]} + ${gets_of[warm/full]} ))" "0"
for q in "${QUERIES[@]}"; do
  row "shoal:// cold origin bytes / bytes read: $q (mount: $(cost "cold/$q" "local/$q"))" "$(cost "py-cold/$q" "local/$q")" "<= mount"
done
for q in "${QUERIES[@]}"; do
  row "shoal:// time / mount time, $q: cold; warm" "$(ratio "${secs_of[py-cold/$q]}" "${secs_of[cold/$q]}"); $(ratio "${secs_of[py-warm/$q]}" "${secs_of[warm/$q]}")" "<= 1"
done
row "shoal:// warm: object GETs at the origin (all three queries)" "$(( ${gets_of[py-warm/rows]} + ${gets_of[py-warm/columns]} + ${gets_of[py-warm/full]} ))" "0"
