#!/usr/bin/env bash
# Sequential read of one large object with the cluster reader alone (no FUSE):
# cold and warm through 3 nodes, against direct parallel ranged GETs from the
# origin (the same reader with no cluster, same read window), all in one run.
# The origin is made to look like S3: +LATENCY_MS before the first byte and a
# per-connection bandwidth cap of BW bytes/s.
source "$(dirname "$0")/lib.sh"
SIZE_MB=${SIZE_MB:-1024}
LATENCY_MS=${LATENCY_MS:-20}
BW=${BW:-100000000}

build
mkdir -p "$work/seed"
head -c "${SIZE_MB}M" /dev/urandom >"$work/seed/obj.bin"
"$bin/shoal-test-origin" --listen 127.0.0.1:0 --access-key "$ORIGIN_KEY" --bucket bench \
  --seed "$work/seed" --addr-file "$work/origin.addr" \
  --first-byte-delay-ms "$LATENCY_MS" --bandwidth "$BW" 2>"$work/origin.log" &
pids+=($!)
wait_file "$work/origin.addr"
origin=$(cat "$work/origin.addr")
ids=()
for i in 1 2 3; do start_node "n$i"; ids+=("\"$node\""); done

origin_toml="[origin]
endpoint = \"http://$origin\"
[origin.credentials]
access_key_id = \"$ORIGIN_KEY\"
secret_access_key_env = \"SHOAL_ORIGIN_SECRET_KEY\""
printf '%s\n[cache]\nram_size = "0"\n' "$origin_toml" >"$work/direct.toml"
list=$(IFS=,; echo "${ids[*]}")
printf '%s\n[cluster]\nnodes = [%s]\n[cluster.credentials]\naccess_key_id = "%s"\nsecret_access_key = "%s"\n[cache]\nram_size = "0"\n' \
  "$origin_toml" "$list" "$NODE_KEY" "$NODE_SECRET" >"$work/cluster.toml"

rate() { "$bin/examples/cluster_read" "$1" s3://bench/obj.bin 2>&1 | sed -n 's/.* \([0-9.]*\) MB\/s$/\1/p'; }
d=$(rate "$work/direct.toml")
c=$(rate "$work/cluster.toml")
w=$(rate "$work/cluster.toml")

echo "reader: sequential ${SIZE_MB} MiB, read window 8 x 1 MiB, origin +${LATENCY_MS} ms first byte, $((BW / 1000000)) MB/s per connection"
printf '%-44s %10s %12s\n' "path" "MB/s" "x direct"
printf '%-44s %10s %12s\n' "origin direct (parallel ranged GETs)" "$d" "1.00"
printf '%-44s %10s %12s\n' "cluster, cold (3 nodes fetch from origin)" "$c" "$(ratio "$c" "$d")"
printf '%-44s %10s %12s\n' "cluster, warm (node RAM)" "$w" "$(ratio "$w" "$d")"
