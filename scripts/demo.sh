#!/usr/bin/env bash
# Runs shoal locally end to end: a real S3 origin with sample data on 127.0.0.1,
# three shoal-node cache nodes, and a shoal-mount FUSE mount of the bucket, read
# with ordinary tools and checked byte for byte against the source files. Everything started here is stopped on exit,
# even on Ctrl-C. Usage: scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=$(mktemp -d /tmp/shoal-demo.XXXXXX)
pids=()
mounted=0
cleanup() {
  if [ "$mounted" = 1 ]; then fusermount3 -u "$work/mnt" 2>/dev/null || fusermount3 -uz "$work/mnt" 2>/dev/null || true; fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

command -v fusermount3 >/dev/null || { echo "== installing fuse3"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 >/dev/null; }
echo "== building (release: the origin, the node, the mount)"
# Only what the demo runs; scripts/test.sh builds the rest on top of it, with
# every dependency as built here.
cargo build --release --quiet -p shoal-testorigin -p shoal-node -p shoal-mount --bins
bin="$root/target/release"

echo "== sample data"
mkdir -p "$work/data/docs" "$work/data/nested/deeper"
head -c 64M /dev/urandom >"$work/data/big.bin"
printf 'hello from shoal\n' >"$work/data/docs/hello.txt"
printf 'x' >"$work/data/docs/one-byte"
: >"$work/data/docs/empty"
head -c 1500000 /dev/urandom >"$work/data/nested/deeper/odd size.bin"
(cd "$work/data" && find . -type f | sort | sed 's|^\./|  |')

echo "== starting the origin (a real S3 server on 127.0.0.1, 20 ms first-byte latency)"
export SHOAL_ORIGIN_SECRET_KEY=demo-secret-0123456789
"$bin/shoal-test-origin" --listen 127.0.0.1:0 --access-key demo --bucket demo \
  --seed "$work/data" --addr-file "$work/origin.addr" --first-byte-delay-ms 20 2>"$work/origin.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/origin.addr" ] && break; sleep 0.1; done
[ -s "$work/origin.addr" ] || { cat "$work/origin.log"; echo "origin did not start" >&2; exit 1; }
origin=$(cat "$work/origin.addr")
echo "  origin at http://$origin"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "== starting three shoal-node cache nodes"
nodes=()
for i in 1 2 3; do
  port=$(free_port)
  cat >"$work/node$i.toml" <<TOML
[origin]
endpoint = "http://$origin"
[origin.credentials]
access_key_id = "demo"
secret_access_key_env = "SHOAL_ORIGIN_SECRET_KEY"
[node]
listen = "127.0.0.1:$port"
[cache]
ram_size = "256MiB"
disk_size = "1GiB"
data_dir = "$work/node$i"
[auth]
[[auth.keys]]
access_key_id = "demo-cluster"
secret_access_key = "demo-cluster-secret"
TOML
  RUST_LOG=warn "$bin/shoal-node" --config "$work/node$i.toml" 2>"$work/node$i.log" &
  pids+=($!)
  nodes+=("127.0.0.1:$port")
done
for n in "${nodes[@]}"; do
  for _ in $(seq 100); do curl -sf "http://$n/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
  curl -sf "http://$n/healthz" >/dev/null || { cat "$work"/node*.log; echo "node $n did not start" >&2; exit 1; }
  echo "  node at http://$n"
done

node_list=$(printf '"%s", ' "${nodes[@]}")
cat >"$work/shoal.toml" <<TOML
[origin]
endpoint = "http://$origin"
[origin.credentials]
access_key_id = "demo"
secret_access_key_env = "SHOAL_ORIGIN_SECRET_KEY"
[cluster]
nodes = [${node_list%, }]
[cluster.credentials]
access_key_id = "demo-cluster"
secret_access_key = "demo-cluster-secret"
[cache]
ram_size = "64MiB"
TOML

echo "== mounting s3://demo at $work/mnt with shoal-mount"
mkdir -p "$work/mnt"
"$bin/shoal-mount" --config "$work/shoal.toml" --log-file "$work/mount.log" demo "$work/mnt"
mounted=1
ls -lR "$work/mnt" | sed 's/^/  /'

# The kernel's page cache would answer repeated reads itself; drop it (as root)
# so the second read shows the nodes' RAM, not local memory.
drop_cache() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true; }
rate() { dd if="$1" of=/dev/null bs=1M 2>&1 | awk '/copied/ { print $(NF-1), $NF }'; }

echo "== big.bin through the mount, cold: each block fetched once from the origin by its owner node"
echo "  $(rate "$work/mnt/big.bin")"
drop_cache
echo "== big.bin again, warm: blocks now in the nodes' RAM (the mount kept none the page cache held)"
echo "  $(rate "$work/mnt/big.bin")"

echo "== md5sum of every file through the mount, against its source file"
fail=0
while IFS= read -r -d '' f; do
  key=${f#"$work/data/"}
  want=$(md5sum <"$f" | cut -d' ' -f1)
  got=$(md5sum <"$work/mnt/$key" | cut -d' ' -f1)
  if [ "$want" = "$got" ]; then
    printf '  ok   %-28s %10d bytes  %s\n' "$key" "$(stat -c %s "$work/mnt/$key")" "$got"
  else
    printf '  FAIL %-28s want %s got %s\n' "$key" "$want" "$got"; fail=1
  fi
done < <(find "$work/data" -type f -print0 | sort -z)

echo "== node hit ratios"
for n in "${nodes[@]}"; do
  m=$(curl -sf "http://$n/metrics")
  hits=$(echo "$m" | awk '/^shoal_node_hits_total\{tier="ram"\}/ {h+=$2} /^shoal_node_hits_total\{tier="disk"\}/ {h+=$2} END {print h+0}')
  misses=$(echo "$m" | awk '/^shoal_node_misses_total\{tier="disk"\}/ {print $2+0}')
  origin_bytes=$(echo "$m" | awk '/^shoal_node_origin_bytes_total / {print $2+0}')
  awk -v n="$n" -v h="$hits" -v m="${misses:-0}" -v o="$origin_bytes" \
    'BEGIN { t = h + m; printf "  %s  hits %d  misses %d  hit ratio %.0f%%  origin bytes %d\n", n, h, m, t ? 100 * h / t : 0, o }'
done

[ "$fail" -eq 0 ] && echo "demo: all objects read back byte-exact through the mount" || { echo "demo: MISMATCH" >&2; exit 1; }
