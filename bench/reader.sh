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
start_slow_cluster 0

rate() { "$bin/examples/cluster_read" "$1" s3://bench/obj.bin 2>&1 | sed -n 's/.* \([0-9.]*\) MB\/s$/\1/p'; }
d=$(rate "$work/direct.toml")
c=$(rate "$work/cluster.toml")
w=$(rate "$work/cluster.toml")

echo "reader: sequential ${SIZE_MB} MiB, read window 8 x 1 MiB, origin +${LATENCY_MS} ms first byte, $((BW / 1000000)) MB/s per connection"
printf '%-44s %10s %12s\n' "path" "MB/s" "x direct"
printf '%-44s %10s %12s\n' "origin direct (parallel ranged GETs)" "$d" "1.00"
printf '%-44s %10s %12s\n' "cluster, cold (3 nodes fetch from origin)" "$c" "$(ratio "$c" "$d")"
printf '%-44s %10s %12s\n' "cluster, warm (node RAM)" "$w" "$(ratio "$w" "$d")"
