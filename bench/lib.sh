# Shared helpers for the benchmark scripts (sourced, not run).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin="$root/target/release"
work=$(mktemp -d /tmp/shoal-bench.XXXXXX)
pids=()
node_pids=()
node_addrs=()
mounts=()
cleanup() {
  # umount -l where fusermount3 is missing (root only).
  for m in "${mounts[@]}"; do fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  restore_memory
  rm -rf "$work" /dev/shm/shoal-bench-prefault
}
trap cleanup EXIT
trap 'exit 130' INT TERM

export SHOAL_ORIGIN_SECRET_KEY=bench-origin-secret-0123
ORIGIN_KEY=bench-origin
NODE_KEY=bench-node
NODE_SECRET=bench-node-secret-0123

build() {
  (cd "$root" && cargo build --release --quiet --workspace --bins --examples)
}

# wait_file FILE [SECONDS]: waits up to SECONDS (20) for FILE to be non-empty.
wait_file() {
  for _ in $(seq $((${2:-20} * 10))); do [ -s "$1" ] && return 0; sleep 0.1; done
  echo "timed out waiting for $1" >&2; return 1
}

# start_origin SEED_DIR [FLAGS...]: starts the test origin (FLAGS go to it, such
# as its fault mode); sets $origin (host:port).
start_origin() {
  local seed=$1; shift
  ${ORIGIN_CPUS:+taskset -c "$ORIGIN_CPUS"} "$bin/shoal-test-origin" --listen 127.0.0.1:0 --access-key "$ORIGIN_KEY" --bucket bench \
    --seed "$seed" --addr-file "$work/origin.addr" "$@" 2>"$work/origin.log" &
  pids+=($!)
  # A large seed takes the origin a while to load (and hash).
  wait_file "$work/origin.addr" 300
  origin=$(cat "$work/origin.addr")
}

# free_port: an unused TCP port on 127.0.0.1.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# build_baseline REV BIN: binary BIN (its package's name too) of revision REV,
# built from its own tree with a target dir of its own (kept between runs);
# prints the binary's path.
build_baseline() {
  local rev dir name=$2
  rev=$(git -C "$root" rev-parse --short=12 "$1^{commit}")
  dir="$root/target/baseline-$rev"
  if [ ! -x "$dir/target/release/$name" ]; then
    echo "building $name at $rev (once, into $dir)" >&2
    rm -rf "$dir/src"; mkdir -p "$dir/src"
    git -C "$root" archive "$rev" | tar -x -C "$dir/src"
    (cd "$dir/src" && CARGO_TARGET_DIR="$dir/target" cargo build --release --quiet -p "$name") >&2
  fi
  echo "$dir/target/release/$name"
}

# start_node NAME [EXTRA_TOML]: starts a shoal-node; sets $node (host:port).
# $NODE_RAM (its RAM tier, 2GiB), $NODE_CACHE (more keys of its [cache] section)
# and $NODE_CPUS (taskset's list) if set; $NODE_BIN
# (another build's shoal-node) instead of this tree's.
start_node() {
  local name=$1 extra=${2:-} port
  port=$(free_port)
  cat >"$work/$name.toml" <<TOML
[origin]
endpoint = "http://$origin"
[origin.credentials]
access_key_id = "$ORIGIN_KEY"
secret_access_key_env = "SHOAL_ORIGIN_SECRET_KEY"
[node]
listen = "127.0.0.1:$port"
[cache]
ram_size = "${NODE_RAM:-2GiB}"
${NODE_CACHE:-}
[auth]
[[auth.keys]]
access_key_id = "$NODE_KEY"
secret_access_key = "$NODE_SECRET"
$extra
TOML
  ${NODE_CPUS:+taskset -c "$NODE_CPUS"} env RUST_LOG=warn "${NODE_BIN:-$bin/shoal-node}" --config "$work/$name.toml" 2>"$work/$name.log" &
  pids+=($!); node_pids+=($!)
  for _ in $(seq 200); do
    curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  node="127.0.0.1:$port"
}

# ratio A B: A/B with two decimals.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

# load ENDPOINT KEY SIZE [flags]: prints MB/s of s3_load.
load() {
  local ep=$1 key=$2 size=$3; shift 3
  SHOAL_LOAD_ACCESS_KEY=${LOAD_KEY:-$NODE_KEY} SHOAL_LOAD_SECRET_KEY=${LOAD_SECRET:-$NODE_SECRET} \
    "$bin/examples/s3_load" --endpoint "http://$ep" --bucket bench --key "$key" --size "$size" "$@" \
    | sed -n 's/^MB\/s=\([0-9.]*\).*/\1/p'
}

# Free page reporting (virtio-balloon): on a VM whose host takes back the pages
# the guest frees, the next process to touch such a page pays the host's fault.
# After drop_cache that is the FUSE daemon filling the page cache: measured here,
# it doubles to triples a daemon's CPU per byte, more than anything the daemon
# does itself, and lands on whichever contender runs first. So while a bench runs
# the reporting waits as long as the kernel lets it (restored at exit), and
# drop_cache touches the memory the next read will use, so that every contender
# finds it backed (prefault). Machines without it are left as they are.
report_dir=/sys/module/page_reporting/parameters
saved_reporting=()
steady_memory() {
  [ -d "$report_dir" ] || return 0
  local p v
  for p in page_reporting_order min_free_ms; do
    [ -w "$report_dir/$p" ] && saved_reporting+=("$p=$(cat "$report_dir/$p")")
  done
  [ ${#saved_reporting[@]} -gt 0 ] || return 0
  # The largest order the kernel takes, and the longest wait.
  echo 10 >"$report_dir/page_reporting_order" 2>/dev/null || true
  for v in 100000 60000 10000; do echo "$v" >"$report_dir/min_free_ms" 2>/dev/null && break; done
  echo "free page reporting held back while the bench runs (was ${saved_reporting[*]}; restored at exit)" >&2
}
restore_memory() {
  local kv
  for kv in "${saved_reporting[@]}"; do echo "${kv#*=}" >"$report_dir/${kv%%=*}" 2>/dev/null || true; done
}
# prefault MIB: touches MIB MiB of memory and frees it again.
prefault() {
  head -c "${1}M" /dev/zero >/dev/shm/shoal-bench-prefault 2>/dev/null || true
  rm -f /dev/shm/shoal-bench-prefault
}

# drop_cache: empties the kernel page cache so reads go to the filesystem, then
# touches $PREFAULT_MB (twice $SIZE_MB, else 1024) MiB so the next read's pages
# are backed (see steady_memory). Needs root; without it every "cold" or "warm"
# figure would be a page-cache read, so it stops the bench rather than go on.
drop_cache() {
  sync
  echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || {
    echo "drop_cache: cannot drop the page cache (not root?): cold and warm figures would be page-cache reads" >&2
    exit 1
  }
  prefault "${PREFAULT_MB:-$(( ${SIZE_MB:-512} * 2 ))}"
}

# dd_rate FILE: MB/s of reading FILE once with 1 MiB blocks (on $READER_CPUS if set),
# from the bytes and seconds dd reports (its own rate has two digits: 2.1 GB/s).
dd_rate() {
  ${READER_CPUS:+taskset -c "$READER_CPUS"} dd if="$1" of=/dev/null bs=1M 2>&1 | awk '/copied/ {
    s = $(NF-3)
    if (s > 0) printf "%.1f", $1 / s / 1e6; else printf "0.0" }'
}

# cpu_ticks PID...: user + system clock ticks the processes have used so far
# (/proc/PID/stat, read past the command name, which may hold spaces).
cpu_ticks() {
  local p t=0 f
  for p in "$@"; do
    f=$(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null) || continue
    set -- $f
    t=$((t + ${12} + ${13}))
  done
  echo "$t"
}

# cpu_run OUT CMD...: runs CMD with its stdout into file OUT; prints the user +
# system CPU milliseconds it and its children used.
cpu_run() {
  local out=$1; shift
  python3 - "$out" "$@" <<'PY'
import resource, subprocess, sys
with open(sys.argv[1], "wb") as out:
    subprocess.run(sys.argv[2:], stdout=out, check=True)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(int((r.ru_utime + r.ru_stime) * 1000))
PY
}

# ms_of_gib MS BYTES: CPU milliseconds (not ticks) per GiB moved.
ms_of_gib() {
  awk -v t="$1" -v n="$2" 'BEGIN { if (n > 0) printf "%.0f", t / (n / 1073741824); else print "n/a" }'
}

# ms_per_gib TICKS BYTES: CPU milliseconds per GiB moved.
ms_per_gib() {
  awk -v t="$1" -v n="$2" -v hz="$(getconf CLK_TCK)" 'BEGIN { if (n > 0) printf "%.0f", t * 1000 / hz / (n / 1073741824); else print "n/a" }'
}

# median N...: the middle one of the numbers given.
median() { printf '%s\n' "$@" | sort -g | sed -n "$(( ($# + 1) / 2 ))p"; }

# warm_rate FILE: the median MB/s of three reads of FILE, each after dropping the
# page cache (one read on this shared machine can be off by half).
warm_rate() { local a=() _i; for _i in 1 2 3; do drop_cache; a+=("$(dd_rate "$1")"); done; median "${a[@]}"; }

# secs CMD...: wall seconds a command takes; a command that fails stops the bench
# (a failing read is quick, and its time would look like a fast one).
secs() {
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >/dev/null 2>&1 || { echo "secs: '$*' failed" >&2; exit 1; }
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'
}

wait_mounted() {
  for _ in $(seq 200); do mountpoint -q "$1" && return 0; sleep 0.1; done
  echo "mount at $1 did not come up" >&2; return 1
}

# start_slow_cluster CLIENT_RAM: an origin seeded from $work/seed with S3-like
# latency ($LATENCY_MS before the first byte, $BW bytes/s per connection), three
# nodes, and two client configs: $work/direct.toml (origin only) and
# $work/cluster.toml (through the nodes, with CLIENT_RAM of client RAM tier).
start_slow_cluster() {
  start_origin "$work/seed" --first-byte-delay-ms "$LATENCY_MS" --bandwidth "$BW"
  local ids=() i list origin_toml
  for i in 1 2 3; do start_node "n$i"; ids+=("\"$node\""); node_addrs+=("$node"); done
  origin_toml="[origin]
endpoint = \"http://$origin\"
[origin.credentials]
access_key_id = \"$ORIGIN_KEY\"
secret_access_key_env = \"SHOAL_ORIGIN_SECRET_KEY\""
  printf '%s\n[cache]\nram_size = "0"\n' "$origin_toml" >"$work/direct.toml"
  list=$(IFS=,; echo "${ids[*]}")
  printf '%s\n[cluster]\nnodes = [%s]\n[cluster.credentials]\naccess_key_id = "%s"\nsecret_access_key = "%s"\n[cache]\nram_size = "%s"\n' \
    "$origin_toml" "$list" "$NODE_KEY" "$NODE_SECRET" "$1" >"$work/cluster.toml"
}
