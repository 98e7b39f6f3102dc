#!/usr/bin/env bash
# Miss ratios of LRU and S3-FIFO (the tiers' policies, the same code the tiers
# run) on the same Zipf streams, alone and with a one-pass scan mixed in, at
# caches of 1% and 10% of the distinct blocks; then each policy's CPU per
# request on a RAM tier's hot path. Pinned to $READER_CPUS (1): it is one
# thread. Knob: REQUESTS (1000000).
source "$(dirname "$0")/lib.sh"
REQUESTS=${REQUESTS:-1000000}
READER_CPUS=${READER_CPUS:-1}
(cd "$root" && cargo build --release --quiet -p shoal --example cache_policy)
taskset -c "$READER_CPUS" "$root/target/release/examples/cache_policy" "$REQUESTS"
