#!/usr/bin/env bash
# Runs shoal locally end to end: a real S3 origin with sample data on 127.0.0.1,
# then reads through shoal and checks every byte against the source files.
# Everything started here is stopped on exit, even on Ctrl-C.
# Usage: scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=$(mktemp -d /tmp/shoal-demo.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== building (release)"
cargo build --release --quiet --workspace --bins --examples
bin="$root/target/release"

echo "== sample data"
mkdir -p "$work/data/docs" "$work/data/nested/deeper"
head -c 48M /dev/urandom >"$work/data/big.bin"
printf 'hello from shoal\n' >"$work/data/docs/hello.txt"
printf 'x' >"$work/data/docs/one-byte"
: >"$work/data/docs/empty"
head -c 1500000 /dev/urandom >"$work/data/nested/deeper/odd size.bin"
find "$work/data" -type f | sort | sed "s|$work/data/|  |"

echo "== starting the origin (a real S3 server on 127.0.0.1)"
export SHOAL_ORIGIN_SECRET_KEY=demo-secret-0123456789
"$bin/shoal-test-origin" --listen 127.0.0.1:0 --access-key demo --bucket demo \
  --seed "$work/data" --addr-file "$work/origin.addr" 2>"$work/origin.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/origin.addr" ] && break; sleep 0.1; done
[ -s "$work/origin.addr" ] || { cat "$work/origin.log"; echo "origin did not start" >&2; exit 1; }
origin=$(cat "$work/origin.addr")
echo "  origin at http://$origin"

cat >"$work/shoal.toml" <<TOML
[origin]
endpoint = "http://$origin"
[origin.credentials]
access_key_id = "demo"
secret_access_key_env = "SHOAL_ORIGIN_SECRET_KEY"
TOML

echo "== listing s3://demo/"
"$bin/examples/s3_get" "$work/shoal.toml" ls s3://demo/

echo "== reading every object and comparing with its source file"
fail=0
while IFS= read -r -d '' f; do
  key=${f#"$work/data/"}
  want=$(md5sum <"$f" | cut -d' ' -f1)
  start=$(date +%s.%N)
  got=$("$bin/examples/s3_get" "$work/shoal.toml" cat "s3://demo/$key" | md5sum | cut -d' ' -f1)
  end=$(date +%s.%N)
  size=$(stat -c %s "$f")
  rate=$(awk -v s="$size" -v a="$start" -v b="$end" 'BEGIN { d = b - a; if (d <= 0) d = 0.001; printf "%.0f", s / d / 1e6 }')
  if [ "$want" = "$got" ]; then
    printf '  ok   %-28s %10d bytes  %6s MB/s  %s\n' "$key" "$size" "$rate" "$got"
  else
    printf '  FAIL %-28s want %s got %s\n' "$key" "$want" "$got"; fail=1
  fi
done < <(find "$work/data" -type f -print0 | sort -z)

echo "== a ranged read: bytes 6-9 of docs/hello.txt"
"$bin/examples/s3_get" "$work/shoal.toml" cat s3://demo/docs/hello.txt 6-9; echo

[ "$fail" -eq 0 ] && echo "demo: all objects read back byte-exact" || { echo "demo: MISMATCH" >&2; exit 1; }
