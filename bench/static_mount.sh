#!/usr/bin/env bash
# The statically linked shoal-mount (musl, what the CSI plugin installs on hosts
# of any libc) against the glibc build, in one run on the same warm nodes: one
# sequential reader and four at once, MB/s and the mount's CPU per GiB. musl's
# own malloc takes one lock for every allocation; the static build allocates
# with mimalloc instead (mount/Cargo.toml), and the third column is the static
# build with musl's malloc (--no-default-features, built once into
# target/musl-malloc).
source "$(dirname "$0")/lib.sh"
SIZE_MB=${SIZE_MB:-512}
LATENCY_MS=${LATENCY_MS:-5}
BW=${BW:-1000000000}
musl_target=x86_64-unknown-linux-musl
static=${STATIC_BIN:-$root/target/static/$musl_target/static/shoal-mount}

command -v fusermount3 >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 >/dev/null; }
build
[ -x "$static" ] || (cd "$root" && CARGO_TARGET_DIR=$root/target/static cargo build --profile static --quiet --locked \
  --target "$musl_target" -p shoal-mount --bin shoal-mount)
readelf -l "$static" | grep -q 'program interpreter' && { echo "$static is not static" >&2; exit 1; }
plain=${PLAIN_BIN:-$root/target/musl-malloc/$musl_target/static/shoal-mount}
[ -x "$plain" ] || (cd "$root" && CARGO_TARGET_DIR=$root/target/musl-malloc cargo build --profile static --quiet --locked \
  --target "$musl_target" -p shoal-mount --bin shoal-mount --no-default-features)
steady_memory

mkdir -p "$work/seed/par"
head -c "${SIZE_MB}M" /dev/urandom >"$work/seed/obj.bin"
for i in 1 2 3 4; do head -c "$((SIZE_MB / 4))M" /dev/urandom >"$work/seed/par/p$i.bin"; done
start_slow_cluster 256MiB

# mount NAME BIN: a mount of the bench bucket at $work/NAME; sets $mpid.
mount_with() {
  mkdir -p "$work/$1"
  "$2" --config "$work/cluster.toml" --log-file "$work/$1.log" bench "$work/$1"
  mounts+=("$work/$1")
  wait_mounted "$work/$1"
  mpid=$(pgrep -f -- "--log-file $work/$1.log" | tr '\n' ' ')
}
mount_with glibc "$bin/shoal-mount"; glibc_pids=$mpid
mount_with static "$static"; static_pids=$mpid
mount_with plain "$plain"; plain_pids=$mpid

# Warm the nodes through one mount: both then read from the nodes' RAM.
cat "$work/glibc/obj.bin" "$work/glibc"/par/* >/dev/null

# measure DIR PIDS: "MB/s-one MB/s-four ms-per-GiB" (medians of three, each
# after the page cache is dropped).
measure() {
  local one=() four=() t0 t bytes=$((SIZE_MB * 2 * 3 << 20)) c0 c1
  c0=$(cpu_ticks $2)
  for _ in 1 2 3; do
    drop_cache; one+=("$(dd_rate "$1/obj.bin")")
    drop_cache
    t=$(secs bash -c "for i in 1 2 3 4; do dd if=\"$1/par/p\$i.bin\" of=/dev/null bs=1M 2>/dev/null & done; wait")
    four+=("$(awk -v s="$SIZE_MB" -v t="$t" 'BEGIN { printf "%.1f", s * 1.048576 / t }')")
  done
  c1=$(cpu_ticks $2)
  echo "$(median "${one[@]}") $(median "${four[@]}") $(ms_per_gib $((c1 - c0)) "$bytes")"
}
# Alternated, so that neither always reads after the other.
read -r g1 g4 gcpu <<<"$(measure "$work/glibc" "$glibc_pids")"
read -r s1 s4 scpu <<<"$(measure "$work/static" "$static_pids")"
read -r p1 p4 pcpu <<<"$(measure "$work/plain" "$plain_pids")"
read -r g1b g4b gcpub <<<"$(measure "$work/glibc" "$glibc_pids")"
read -r s1b s4b scpub <<<"$(measure "$work/static" "$static_pids")"
read -r p1b p4b pcpub <<<"$(measure "$work/plain" "$plain_pids")"
best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > b ? a : b) }'; }
least() { awk -v a="$1" -v b="$2" 'BEGIN { print (a < b ? a : b) }'; }
g1=$(best "$g1" "$g1b"); g4=$(best "$g4" "$g4b"); gcpu=$(least "$gcpu" "$gcpub")
s1=$(best "$s1" "$s1b"); s4=$(best "$s4" "$s4b"); scpu=$(least "$scpu" "$scpub")
p1=$(best "$p1" "$p1b"); p4=$(best "$p4" "$p4b"); pcpu=$(least "$pcpu" "$pcpub")

echo "static_mount: $SIZE_MB MiB warm from 3 nodes' RAM; glibc build $(du -m "$bin/shoal-mount" | cut -f1) MiB, static $(du -m "$static" | cut -f1) MiB ($(file -b "$static" | cut -d, -f1-2))"
printf '%-42s %8s %8s %12s %14s %12s\n' "measure" "glibc" "static" "static/glibc" "musl-malloc" "/glibc"
row() { printf '%-42s %8s %8s %12s %14s %12s\n' "$1" "$2" "$3" "$(ratio "$3" "$2")" "$4" "$(ratio "$4" "$2")"; }
row "warm sequential, one reader, MB/s" "$g1" "$s1" "$p1"
row "warm sequential, four readers, total MB/s" "$g4" "$s4" "$p4"
row "mount CPU ms per GiB read" "$gcpu" "$scpu" "$pcpu"
echo "static: mimalloc (the shipped build); musl-malloc: the same with musl's own allocator"
