#!/usr/bin/env bash
# Two tiers: plain S3 clients (8 concurrent readers of random 1 MiB ranges) against
# gateway A and gateway B, each with its own RAM tier, in front of three owner
# nodes, over an origin with S3-like latency (+20 ms first byte, 100 MB/s per
# connection). Baseline: the same load against the origin directly, in this run.
#  - one pass over a cold object (each 1 MiB block read once): from the origin,
#    through gateway A with every tier cold (A's misses go to the owners, which
#    fetch from the origin), then through gateway B, whose own tier is cold but
#    whose misses find the owners warm. The origin bytes during B's pass say
#    whether the second gateway cost the origin anything.
#  - random ranges for a while over a warm object: A answering from its own RAM.
source "$(dirname "$0")/lib.sh"
SIZE_MB=${SIZE_MB:-256}
SECONDS_EACH=${SECONDS_EACH:-5}
CONC=${CONC:-8}
LATENCY_MS=${LATENCY_MS:-20}
BW=${BW:-100000000}

build
mkdir -p "$work/seed"
head -c "${SIZE_MB}M" /dev/urandom >"$work/seed/obj.bin"
head -c "${SIZE_MB}M" /dev/urandom >"$work/seed/cold.bin"
size=$((SIZE_MB * 1024 * 1024))
start_origin "$work/seed" --first-byte-delay-ms "$LATENCY_MS" --bandwidth "$BW"
ids=()
for i in 1 2 3; do start_node "o$i"; ids+=("\"$node\""); done
cluster="[cluster]
nodes = [$(IFS=,; echo "${ids[*]}")]
[cluster.credentials]
access_key_id = \"$NODE_KEY\"
secret_access_key = \"$NODE_SECRET\""
start_node ga "$cluster"; ga=$node
start_node gb "$cluster"; gb=$node

origin_bytes() { curl -s "http://$origin/_origin/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["body_bytes_sent"])'; }

flags=(--concurrency "$CONC" --seconds "$SECONDS_EACH")
once=(--concurrency "$CONC" --once)
as_origin() { LOAD_KEY=$ORIGIN_KEY LOAD_SECRET=$SHOAL_ORIGIN_SECRET_KEY "$@"; }
# Cold single passes: each block read exactly once.
oc=$(as_origin load "$origin" cold.bin "$size" "${once[@]}")
ac=$(load "$ga" cold.bin "$size" "${once[@]}")
before=$(origin_bytes)
bc=$(load "$gb" cold.bin "$size" "${once[@]}")
after=$(origin_bytes)
# Warm: random ranges for a while.
o=$(as_origin load "$origin" obj.bin "$size" "${flags[@]}")
a=$(load "$ga" obj.bin "$size" "${flags[@]}" --warm)

echo "gateway: $CONC clients, ${SIZE_MB} MiB objects, 1 MiB ranged GETs; origin +${LATENCY_MS} ms first byte, $((BW / 1000000)) MB/s per connection"
printf '%-46s %10s %10s\n' "one pass over a cold object" "MB/s" "x origin"
printf '%-46s %10s %10s\n' "origin directly (baseline)" "$oc" "1.00"
printf '%-46s %10s %10s\n' "gateway A, every tier cold" "$ac" "$(ratio "$ac" "$oc")"
printf '%-46s %10s %10s\n' "gateway B, own tier cold, owners warm" "$bc" "$(ratio "$bc" "$oc")"
echo "origin bytes sent during gateway B's pass: $((after - before))"
printf '%-46s %10s %10s\n' "random ranges, ${SECONDS_EACH}s" "MB/s" "x origin"
printf '%-46s %10s %10s\n' "origin directly (baseline)" "$o" "1.00"
printf '%-46s %10s %10s\n' "gateway A, warm (its own RAM)" "$a" "$(ratio "$a" "$o")"
