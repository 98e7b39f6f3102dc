#!/usr/bin/env bash
# shoal beside every peer on this machine, in one run, on one origin (the test
# origin with S3-like first-byte latency and a per-connection cap): mountpoint-s3
# (plain and --cache), rclone mount (--vfs-cache-mode full) and s3fs, against the
# origin's own 32-connection pull, a null FUSE filesystem and a local file. Prints
# each measure and the ratios the project holds itself to.
#
# Knobs: SIZE_MB (1024), LATENCY_MS (20), BW (100000000 bytes/s per connection),
# MOUNT_S3 (path of a mountpoint-s3 build; default ../shared/peers/mount-s3),
# SMALL_FILES (1000, of 16 KiB), READERS (8, for the origin-cost run),
# BASELINE_REV (a git revision: its shoal-mount, built once into
# target/baseline-REV, reads fresh objects cold and then warm beside this one's
# on the same nodes, three rounds in turns, best of each; BASELINE_ONLY=1 stops
# after that comparison).
#
# Pinned as if the nodes were other hosts: the origin and the nodes on core
# $SERVICE_CPUS (0), every FUSE daemon and its reader on $READER_CPUS (1); each
# daemon's CPU per GiB read (user + system, /proc/PID/stat) is printed beside its
# MB/s, a figure that does not depend on what else runs. Floors beside them: the
# null FUSE filesystem (replying one MiB of zeros that stays in cache, and from a
# 256 MiB ring, as a daemon with real bytes does), and the client of the origin
# pull. The warm ratios against mountpoint-s3 --cache come from the two read in
# turns, five passes each. The first byte of a cold sequential read (a 4 KiB read of a file nobody
# read) is set against the origin's first byte plus one hop to a node.
source "$(dirname "$0")/lib.sh"
SERVICE_CPUS=${SERVICE_CPUS:-0}
export ORIGIN_CPUS=$SERVICE_CPUS NODE_CPUS=$SERVICE_CPUS READER_CPUS=${READER_CPUS:-1}
pin() { taskset -c "$READER_CPUS" "$@"; }
SIZE_MB=${SIZE_MB:-1024}
LATENCY_MS=${LATENCY_MS:-20}
BW=${BW:-100000000}
SMALL_FILES=${SMALL_FILES:-1000}
READERS=${READERS:-8}
MOUNT_S3=${MOUNT_S3:-$root/../shared/peers/mount-s3}

need=()
for t in fio rclone s3fs fusermount3; do command -v "$t" >/dev/null || need+=("$t"); done
[ -e /usr/lib/x86_64-linux-gnu/libfuse.so.2 ] || need+=(libfuse2)
[ ${#need[@]} -eq 0 ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio rclone s3fs fuse3 libfuse2 >/dev/null; }
build
have_ms3=0; [ -x "$MOUNT_S3" ] && have_ms3=1
steady_memory
FB_FILES=${FB_FILES:-7}
BASELINE_REV=${BASELINE_REV:-}
BASELINE_ONLY=${BASELINE_ONLY:-0}
ROUNDS=3
base_bin=""
if [ -n "$BASELINE_REV" ]; then base_bin=$(build_baseline "$BASELINE_REV" shoal-mount); fi

echo "seeding: ${SIZE_MB} MiB objects, $SMALL_FILES files of 16 KiB" >&2
mkdir -p "$work/seed/small"
# shoal's object, one for the origin-cost run, one for random reads, and one the
# peers share (each keeps its own cache of it; none of them uses the nodes).
# (The before/after comparison alone needs none of them.)
if [ "$BASELINE_ONLY" != 1 ]; then
  for o in obj many rand peer disk; do head -c "${SIZE_MB}M" /dev/urandom >"$work/seed/$o.bin"; done
fi
# Before/after: each side reads objects of its own, a fresh one cold each round.
if [ -n "$base_bin" ]; then
  for i in $(seq "$ROUNDS"); do
    for side in base new; do head -c "${SIZE_MB}M" /dev/urandom >"$work/seed/$side$i.bin"; done
  done
fi
# Files nobody reads before their first byte is timed.
for i in $(seq "$FB_FILES"); do head -c 8M /dev/urandom >"$work/seed/fb$i.bin"; done
head -c $((SMALL_FILES * 16384)) /dev/urandom | split -b 16384 -a 4 -d - "$work/seed/small/f"
start_slow_cluster 256MiB

mkdir -p "$work/shoal" "$work/null"
pin "$bin/shoal-mount" --config "$work/cluster.toml" --log-file "$work/mount.log" bench "$work/shoal"
mounts+=("$work/shoal")
# taskset itself in the background (not the pin function's subshell): $! is then
# the daemon's own pid.
taskset -c "$READER_CPUS" "$bin/examples/nullfs" "$work/null" "$((SIZE_MB * 1024 * 1024))" >/dev/null 2>&1 &
null_pid=$!; pids+=($!); mounts+=("$work/null"); wait_mounted "$work/null"
mkdir -p "$work/nullring"
taskset -c "$READER_CPUS" "$bin/examples/nullfs" "$work/nullring" "$((SIZE_MB * 1024 * 1024))" 256 >/dev/null 2>&1 &
ring_pid=$!; pids+=($!); mounts+=("$work/nullring"); wait_mounted "$work/nullring"
S=$work/shoal
# The process that serves the mount (its keeper only holds the connection).
mount_pid=$("$bin/shoal-mount" --status "$S" | python3 -c 'import json, sys; print(json.load(sys.stdin)["server"])')

# Before/after: this shoal-mount against BASELINE_REV's on the same nodes, each
# reading its own objects: cold (a fresh object each round, nodes cold for it),
# then warm from the nodes (page cache dropped). Rounds alternate which side
# goes first; each side's best round counts (noise only slows a read).
if [ -n "$base_bin" ]; then
  mkdir -p "$work/base"
  pin "$base_bin" --config "$work/cluster.toml" --log-file "$work/base.log" bench "$work/base"
  mounts+=("$work/base")
  base_pid=$("$base_bin" --status "$work/base" | python3 -c 'import json, sys; print(json.load(sys.stdin)["server"])')
  declare -A ba_cold ba_warm ba_cold_cpu ba_warm_cpu
  # side_read SIDE ROUND: one cold and one warm read; appends to the tables.
  side_read() {
    local side=$1 i=$2 dir pid t0 t1 t2 c w
    if [ "$side" = base ]; then dir=$work/base; pid=$base_pid; else dir=$S; pid=$mount_pid; fi
    drop_cache
    t0=$(cpu_ticks "$pid"); c=$(dd_rate "$dir/$side$i.bin"); t1=$(cpu_ticks "$pid")
    drop_cache; w=$(dd_rate "$dir/$side$i.bin"); t2=$(cpu_ticks "$pid")
    ba_cold[$side]+="$c "; ba_warm[$side]+="$w "
    ba_cold_cpu[$side]+="$(ms_per_gib $((t1 - t0)) "$((SIZE_MB << 20))") "
    ba_warm_cpu[$side]+="$(ms_per_gib $((t2 - t1)) "$((SIZE_MB << 20))") "
  }
  for i in $(seq "$ROUNDS"); do
    if [ $((i % 2)) = 1 ]; then side_read base "$i"; side_read new "$i"; else side_read new "$i"; side_read base "$i"; fi
  done
  best() { printf '%s\n' $1 | sort -g | tail -1; }
  echo "before/after: ${SIZE_MB} MiB sequential (dd bs=1M) through the same 3 nodes, $ROUNDS rounds in turns, best of each"
  printf '%-34s %10s %10s %14s %14s   %s\n' "shoal-mount" "cold MB/s" "warm MB/s" "cold ms/GiB" "warm ms/GiB" "every round: cold; warm"
  for side in base new; do
    label=$([ "$side" = base ] && echo "at $BASELINE_REV" || echo "this tree")
    printf '%-34s %10s %10s %14s %14s   %s; %s\n' "$label" "$(best "${ba_cold[$side]}")" "$(best "${ba_warm[$side]}")" \
      "$(median ${ba_cold_cpu[$side]})" "$(median ${ba_warm_cpu[$side]})" "${ba_cold[$side]}" "${ba_warm[$side]}"
  done
  printf '%-60s %10s %10s\n' "ratio" "value" "target"
  printf '%-60s %10s %10s\n' "sequential cold, best of $ROUNDS: this tree / $BASELINE_REV" \
    "$(ratio "$(best "${ba_cold[new]}")" "$(best "${ba_cold[base]}")")" ">= 0.9"
  printf '%-60s %10s %10s\n' "sequential warm, best of $ROUNDS: this tree / $BASELINE_REV" \
    "$(ratio "$(best "${ba_warm[new]}")" "$(best "${ba_warm[base]}")")" ">= 0.9"
  fusermount3 -u "$work/base" 2>/dev/null || true
  [ "$BASELINE_ONLY" = 1 ] && exit 0
fi

# The origin itself: 32 parallel 8 MiB GETs over the whole object, once, by a
# client on the reader's core (its CPU per GiB: what receiving the bytes costs).
pull_ms=$(SHOAL_LOAD_ACCESS_KEY=$ORIGIN_KEY SHOAL_LOAD_SECRET_KEY=$SHOAL_ORIGIN_SECRET_KEY cpu_run "$work/pull.out" \
  taskset -c "$READER_CPUS" "$bin/examples/s3_load" --endpoint "http://$origin" --bucket bench --key obj.bin \
  --size "$((SIZE_MB << 20))" --block 8388608 --concurrency 32 --once)
pull=$(sed -n 's/^MB\/s=\([0-9.]*\).*/\1/p' "$work/pull.out")
pull_cpu=$(ms_of_gib "$pull_ms" "$((SIZE_MB << 20))")
# A direct ranged 4 KiB GET, one at a time: its median latency in ms, as fio's
# median is below.
direct_4k=$(SHOAL_LOAD_ACCESS_KEY=$ORIGIN_KEY SHOAL_LOAD_SECRET_KEY=$SHOAL_ORIGIN_SECRET_KEY \
  "$bin/examples/s3_load" --endpoint "http://$origin" --bucket bench --key rand.bin --size "$((SIZE_MB << 20))" \
  --block 4096 --concurrency 1 --seconds 3 | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^p50_ms=/) { split($i, a, "="); print a[2] } }')
[ -n "$direct_4k" ] || { echo "the direct GET latency was not measured" >&2; exit 1; }

# shoal: cold, warm from the nodes (page cache dropped; the mount's RAM tier is
# smaller than the object), re-read from the page cache.
bytes=$((SIZE_MB << 20))
drop_cache
t0=$(cpu_ticks "$mount_pid"); n0=$(cpu_ticks "${node_pids[@]}")
cold=$(dd_rate "$S/obj.bin")
t1=$(cpu_ticks "$mount_pid"); n1=$(cpu_ticks "${node_pids[@]}")
warm=$(warm_rate "$S/obj.bin")
t2=$(cpu_ticks "$mount_pid"); n2=$(cpu_ticks "${node_pids[@]}")
cold_cpu=$(ms_per_gib $((t1 - t0)) "$bytes"); cold_nodes=$(ms_per_gib $((n1 - n0)) "$bytes")
warm_cpu=$(ms_per_gib $((t2 - t1)) $((3 * bytes))); warm_nodes=$(ms_per_gib $((n2 - n1)) $((3 * bytes)))
# Re-reads from the page cache take a fraction of a second: five in turns with
# a local file's, each side's median.
cp "$work/seed/obj.bin" "$work/pc.bin"; dd_rate "$work/pc.bin" >/dev/null
rereads=(); pcs=()
for _ in 1 2 3 4 5; do rereads+=("$(dd_rate "$S/obj.bin")"); pcs+=("$(dd_rate "$work/pc.bin")"); done
reread=$(median "${rereads[@]}"); local_pc=$(median "${pcs[@]}")
rm -f "$work/pc.bin"
rss_kb=$(awk '/VmHWM/ {print $2}' "/proc/$mount_pid/status" 2>/dev/null || echo 0)
t0=$(cpu_ticks "$null_pid"); null=$(warm_rate "$work/null/zero"); t1=$(cpu_ticks "$null_pid")
null_cpu=$(ms_per_gib $((t1 - t0)) $((3 * bytes)))
t0=$(cpu_ticks "$ring_pid"); ring=$(warm_rate "$work/nullring/zero"); t1=$(cpu_ticks "$ring_pid")
ring_cpu=$(ms_per_gib $((t1 - t0)) $((3 * bytes)))
# First byte of a cold sequential read: a 4 KiB read of a file nobody has read
# (the mount, the nodes and the page cache all cold), the median of $FB_FILES
# opened against listing order (in order, the mount would fetch the next ahead);
# against the origin's first byte (the direct 4 KiB GET above) plus one hop (a
# 4 KiB GET of a block a node holds).
drop_cache
fb=$(taskset -c "$READER_CPUS" python3 - "$S" "$FB_FILES" <<'PY'
import os, statistics, sys, time
took = []
for i in reversed(range(1, int(sys.argv[2]) + 1)):
    fd = os.open(f"{sys.argv[1]}/fb{i}.bin", os.O_RDONLY)
    t = time.perf_counter()
    assert len(os.read(fd, 4096)) == 4096
    took.append((time.perf_counter() - t) * 1000)
    os.close(fd)
print("%.2f" % statistics.median(took))
PY
)
hop=$(SHOAL_LOAD_ACCESS_KEY=$NODE_KEY SHOAL_LOAD_SECRET_KEY=$NODE_SECRET taskset -c "$READER_CPUS" \
  "$bin/examples/s3_load" --endpoint "http://${node_addrs[0]}" --bucket bench --key obj.bin --size 1048576 \
  --block 4096 --concurrency 1 --seconds 2 --warm | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^p50_ms=/) { split($i, a, "="); print a[2] } }')
fb_floor=$(awk -v a="$direct_4k" -v b="$hop" 'BEGIN { printf "%.2f", a + b }')
# A cold 4 KiB random read through the mount: fio's median completion latency.
rand_4k=$(fio --name=r --filename="$S/rand.bin" --rw=randread --bs=4k --ioengine=psync --direct=1 \
  --number_ios=100 --numjobs=1 --output-format=json 2>/dev/null |
  python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]["read"]["clat_ns"]["percentile"]; print("%.2f" % (j["50.000000"] / 1e6))' 2>/dev/null || echo n/a)
drop_cache; small=$(secs bash -c "cat '$S'/small/* >/dev/null")

# A mount with its own disk tier: the first read fills it, the second finds the
# file whole (and verifies it once), later ones, page cache dropped, are read by
# the kernel from the tier's file through FUSE passthrough.
mkdir -p "$work/shoald" "$work/disk-cache"
{ cat "$work/cluster.toml"; printf '[mount]\ndisk_cache = "%s"\ndisk_cache_size = "%dMiB"\n' "$work/disk-cache" $((SIZE_MB * 2)); } >"$work/disk.toml"
"$bin/shoal-mount" --config "$work/disk.toml" --log-file "$work/mountd.log" --metrics-addr "127.0.0.1:$(free_port)" bench "$work/shoald"
mounts+=("$work/shoald")
drop_cache; dd_rate "$work/shoald/disk.bin" >/dev/null
dd_rate "$work/shoald/disk.bin" >/dev/null
# The local file: the same bytes, written to the same disk at the same time. This
# disk's speed varies from one read to the next, so the two are read in turns,
# five times each, and each gets its median.
cp "$work/seed/disk.bin" "$work/local.bin"
pts=(); locals=()
for _ in 1 2 3 4 5; do
  drop_cache; pts+=("$(dd_rate "$work/shoald/disk.bin")")
  drop_cache; locals+=("$(dd_rate "$work/local.bin")")
done
passthrough=$(median "${pts[@]}"); local_disk=$(median "${locals[@]}")
dd_rate "$work/shoald/disk.bin" >/dev/null; pt_reread=$(dd_rate "$work/shoald/disk.bin")

# READERS mounts reading one object at once: what the origin sent for it.
sent() { curl -s "http://$origin/_origin/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["body_bytes_sent"])'; }
before=$(sent)
for i in $(seq "$READERS"); do
  mkdir -p "$work/m$i"
  "$bin/shoal-mount" --config "$work/cluster.toml" --log-file "$work/m$i.log" bench "$work/m$i"
  mounts+=("$work/m$i")
done
readers=()
for i in $(seq "$READERS"); do dd if="$work/m$i/many.bin" of=/dev/null bs=1M 2>/dev/null & readers+=($!); done
wait "${readers[@]}"
after=$(sent)
cost=$(awk -v a="$before" -v b="$after" -v s="$SIZE_MB" 'BEGIN { printf "%.3f", (b - a) / (s * 1048576) }')

# Peers: cold = first read; warm = the median of three more, page cache dropped
# before each; re-read = the next, page cache kept.
# With PID, also the daemon's CPU ms per GiB of the cold and the warm reads.
peer_reads() { # DIR FILE [PID] -> "cold warm reread cold-cpu warm-cpu"
  local c w r t0 t1 t2 pid=${3:-}
  drop_cache
  t0=$( [ -n "$pid" ] && cpu_ticks "$pid" || echo 0)
  c=$(dd_rate "$1/$2")
  t1=$( [ -n "$pid" ] && cpu_ticks "$pid" || echo 0)
  w=$(warm_rate "$1/$2")
  t2=$( [ -n "$pid" ] && cpu_ticks "$pid" || echo 0)
  r=$(dd_rate "$1/$2")
  if [ -n "$pid" ]; then
    echo "$c $w $r $(ms_per_gib $((t1 - t0)) "$bytes") $(ms_per_gib $((t2 - t1)) $((3 * bytes)))"
  else
    echo "$c $w $r n/a n/a"
  fi
}
# The pid of a daemon serving mount DIR (its command line names DIR).
daemon_of() { pgrep -f -- " $1( |\$)" | head -1; }
ms3=(n/a n/a n/a n/a n/a); ms3c=(n/a n/a n/a n/a n/a); rcl=(n/a n/a n/a); s3f=(n/a n/a n/a)
ms3_small=n/a; ms3c_small=n/a; rc_small=n/a; s3_small=n/a
turns="not measured (no mountpoint-s3)"; turn_warm=n/a; turn_cpu=n/a; turn_warm_c=n/a; turn_cpu_c=n/a
if [ "$have_ms3" = 1 ]; then
  mkdir -p "$work/ms3" "$work/ms3c" "$work/ms3-cache"
  AWS_ACCESS_KEY_ID=$ORIGIN_KEY AWS_SECRET_ACCESS_KEY=$SHOAL_ORIGIN_SECRET_KEY pin "$MOUNT_S3" bench "$work/ms3" \
    --endpoint-url "http://$origin" --force-path-style --region us-east-1 >"$work/ms3.log" 2>&1 && mounts+=("$work/ms3")
  AWS_ACCESS_KEY_ID=$ORIGIN_KEY AWS_SECRET_ACCESS_KEY=$SHOAL_ORIGIN_SECRET_KEY pin "$MOUNT_S3" bench "$work/ms3c" \
    --endpoint-url "http://$origin" --force-path-style --region us-east-1 \
    --cache "$work/ms3-cache" --max-cache-size $((SIZE_MB * 2)) >"$work/ms3c.log" 2>&1 && mounts+=("$work/ms3c")
  if wait_mounted "$work/ms3" 2>/dev/null; then
    read -r -a ms3 <<<"$(peer_reads "$work/ms3" peer.bin "$(daemon_of "$work/ms3")")"
    drop_cache; ms3_small=$(secs bash -c "cat '$work/ms3'/small/* >/dev/null")
  fi
  if wait_mounted "$work/ms3c" 2>/dev/null; then
    ms3c_pid=$(daemon_of "$work/ms3c")
    read -r -a ms3c <<<"$(peer_reads "$work/ms3c" peer.bin "$ms3c_pid")"
    # The warm ratios: shoal and mountpoint-s3 --cache read in turns, five times
    # each, page cache dropped before each. --cache reads its own cache from this
    # disk, whose speed varies from one read to the next (see the local file
    # above), and the machine drifts over a run: in turns both see the same.
    # Each side: its median MB/s, its CPU over all five passes. The two null FUSE
    # daemons take their turns too: what no FUSE daemon can beat, set against
    # --cache in the same passes, says whether a target against it is reachable.
    turn_s=(); turn_c=(); turn_n=(); turn_r=(); s_ticks=0; c_ticks=0; n_ticks=0; r_ticks=0
    for _ in 1 2 3 4 5; do
      drop_cache; t0=$(cpu_ticks "$mount_pid"); turn_s+=("$(dd_rate "$S/obj.bin")"); t1=$(cpu_ticks "$mount_pid")
      s_ticks=$((s_ticks + t1 - t0))
      drop_cache; t0=$(cpu_ticks "$ms3c_pid"); turn_c+=("$(dd_rate "$work/ms3c/peer.bin")"); t1=$(cpu_ticks "$ms3c_pid")
      c_ticks=$((c_ticks + t1 - t0))
      drop_cache; t0=$(cpu_ticks "$null_pid"); turn_n+=("$(dd_rate "$work/null/zero")"); t1=$(cpu_ticks "$null_pid")
      n_ticks=$((n_ticks + t1 - t0))
      drop_cache; t0=$(cpu_ticks "$ring_pid"); turn_r+=("$(dd_rate "$work/nullring/zero")"); t1=$(cpu_ticks "$ring_pid")
      r_ticks=$((r_ticks + t1 - t0))
    done
    turn_null=$(median "${turn_n[@]}"); turn_cpu_n=$(ms_per_gib "$n_ticks" $((5 * bytes)))
    turn_ring=$(median "${turn_r[@]}"); turn_cpu_r=$(ms_per_gib "$r_ticks" $((5 * bytes)))
    turns="shoal $(median "${turn_s[@]}") MB/s $(ms_per_gib "$s_ticks" $((5 * bytes))) ms/GiB (${turn_s[*]}); mountpoint-s3 --cache $(median "${turn_c[@]}") MB/s $(ms_per_gib "$c_ticks" $((5 * bytes))) ms/GiB (${turn_c[*]}); null FUSE $turn_null MB/s $turn_cpu_n ms/GiB (${turn_n[*]}); null FUSE from a ring $turn_ring MB/s $turn_cpu_r ms/GiB (${turn_r[*]})"
    turn_warm=$(median "${turn_s[@]}"); turn_cpu=$(ms_per_gib "$s_ticks" $((5 * bytes)))
    turn_warm_c=$(median "${turn_c[@]}"); turn_cpu_c=$(ms_per_gib "$c_ticks" $((5 * bytes)))
  fi
fi
export RCLONE_CONFIG_ORIGIN_TYPE=s3 RCLONE_CONFIG_ORIGIN_PROVIDER=Other RCLONE_CONFIG_ORIGIN_ENDPOINT="http://$origin" \
  RCLONE_CONFIG_ORIGIN_ACCESS_KEY_ID="$ORIGIN_KEY" RCLONE_CONFIG_ORIGIN_SECRET_ACCESS_KEY="$SHOAL_ORIGIN_SECRET_KEY"
mkdir -p "$work/rclone" "$work/s3fs"
(unset AWS_CA_BUNDLE; pin rclone mount origin:bench "$work/rclone" --vfs-cache-mode full --cache-dir "$work/rclone-cache" \
  --daemon --log-file "$work/rclone.log") && mounts+=("$work/rclone")
if wait_mounted "$work/rclone" 2>/dev/null; then
  read -r -a rcl <<<"$(peer_reads "$work/rclone" peer.bin)"
  drop_cache; rc_small=$(secs bash -c "cat '$work/rclone'/small/* >/dev/null")
fi
printf '%s:%s\n' "$ORIGIN_KEY" "$SHOAL_ORIGIN_SECRET_KEY" >"$work/s3fs.passwd"; chmod 600 "$work/s3fs.passwd"
pin s3fs bench "$work/s3fs" -o url="http://$origin" -o use_path_request_style -o passwd_file="$work/s3fs.passwd" \
  -o endpoint=us-east-1 2>"$work/s3fs.log" && mounts+=("$work/s3fs")
if wait_mounted "$work/s3fs" 2>/dev/null; then
  read -r -a s3f <<<"$(peer_reads "$work/s3fs" peer.bin)"
  drop_cache; s3_small=$(secs bash -c "cat '$work/s3fs'/small/* >/dev/null")
fi

echo "peers: ${SIZE_MB} MiB sequential (dd bs=1M), 3 nodes, origin +${LATENCY_MS} ms first byte, $((BW / 1000000)) MB/s per connection"
printf '%-34s %10s %10s %10s %16s\n' "tool" "cold MB/s" "warm MB/s" "re-read" "$SMALL_FILES x 16 KiB s"
printf '%-34s %10s %10s %10s %16s\n' "shoal" "$cold" "$warm" "$reread" "$small"
printf '%-34s %10s %10s %10s %16s\n' "shoal, mount disk tier" "" "$passthrough" "$pt_reread" ""
printf '%-34s %10s %10s %10s %16s\n' "mountpoint-s3" "${ms3[0]}" "${ms3[1]}" "${ms3[2]}" "$ms3_small"
printf '%-34s %10s %10s %10s %16s\n' "mountpoint-s3 --cache" "${ms3c[0]}" "${ms3c[1]}" "${ms3c[2]}" "$ms3c_small"
printf '%-34s %10s %10s %10s %16s\n' "rclone vfs full" "${rcl[0]}" "${rcl[1]}" "${rcl[2]}" "$rc_small"
printf '%-34s %10s %10s %10s %16s\n' "s3fs" "${s3f[0]}" "${s3f[1]}" "${s3f[2]}" "$s3_small"
echo "pinned: origin and nodes on core $SERVICE_CPUS, each FUSE daemon and its reader on core $READER_CPUS"
printf '%-34s %16s %16s\n' "CPU ms per GiB read" "cold" "warm"
printf '%-34s %16s %16s\n' "shoal mount" "$cold_cpu" "$warm_cpu"
printf '%-34s %16s %16s\n' "shoal nodes (all three)" "$cold_nodes" "$warm_nodes"
printf '%-34s %16s %16s\n' "mountpoint-s3" "${ms3[3]}" "${ms3[4]}"
printf '%-34s %16s %16s\n' "mountpoint-s3 --cache" "${ms3c[3]}" "${ms3c[4]}"
printf '%-34s %16s %16s\n' "null FUSE" "" "$null_cpu"
printf '%-34s %16s %16s\n' "null FUSE, from a 256 MiB ring" "" "$ring_cpu"
printf '%-34s %16s %16s\n' "origin pull client (floor)" "$pull_cpu" ""
echo "baselines: origin 32-connection pull $pull MB/s; null FUSE $null MB/s (from a 256 MiB ring $ring MB/s); local file $local_disk MB/s from disk (median of ${locals[*]}; passthrough ${pts[*]}), $local_pc MB/s from the page cache (median of ${pcs[*]}; shoal ${rereads[*]}); direct 4 KiB GET ${direct_4k} ms; 4 KiB GET of a warm block from a node ${hop} ms"
echo "warm in turns with mountpoint-s3 --cache: $turns"
row() { printf '%-60s %10s %10s\n' "$1" "$2" "$3"; }
printf '%-60s %10s %10s\n' "ratio" "value" "target"
row "cold: shoal / mountpoint-s3" "$(ratio "$cold" "${ms3[0]}")" ">= 1.5"
row "cold: shoal / origin 32-connection pull" "$(ratio "$cold" "$pull")" ">= 0.5"
row "warm from the disk tier (passthrough) / local file from disk" "$(ratio "$passthrough" "$local_disk")" ">= 0.9"
row "warm from the disk tier (passthrough) / mountpoint-s3 --cache" "$(ratio "$passthrough" "${ms3c[1]}")" ">= 3"
row "re-read: shoal / local page cache" "$(ratio "$reread" "$local_pc")" ">= 0.9"
row "cold 4 KiB random read median: shoal / direct GET" "$(ratio "$rand_4k" "$direct_4k") (${rand_4k} ms)" "<= 1.3"
row "$SMALL_FILES small files: mountpoint-s3 / shoal (x faster)" "$(ratio "$ms3_small" "$small")" ">= 10"
row "$READERS mounts reading one object: origin bytes / object size" "$cost" "<= 1.05"
row "mount peak RSS MiB (RAM tier 256 + in-flight 64 + 64)" "$((rss_kb / 1024))" "<= 384"
row "warm CPU per GiB: shoal mount / null FUSE daemon" "$(ratio "$warm_cpu" "$null_cpu")" "<= 2"
row "warm CPU per GiB, in turns: shoal mount / mountpoint-s3 --cache" "$(ratio "$turn_cpu" "$turn_cpu_c")" "<= 0.35"
row "warm MB/s pinned: shoal / null FUSE" "$(ratio "$warm" "$null")" ">= 0.7"
row "warm MB/s pinned, in turns: shoal / mountpoint-s3 --cache" "$(ratio "$turn_warm" "$turn_warm_c")" ">= 2.5"
row "cold CPU per GiB: shoal mount / mountpoint-s3" "$(ratio "$cold_cpu" "${ms3[3]}")" "<= 0.4"
row "cold first byte: shoal / (origin first byte + one hop)" "$(ratio "$fb" "$fb_floor") (${fb} ms)" "<= 1.3"
row "warm CPU per GiB: shoal mount / null FUSE from a ring" "$(ratio "$warm_cpu" "$ring_cpu")" "(floor)"
# Floors of the two targets against --cache: the null FUSE daemons in the same
# turns. A floor past its target means no FUSE daemon meets it in this run.
row "floor, in turns: null FUSE CPU per GiB / mountpoint-s3 --cache" "$(ratio "$turn_cpu_n" "$turn_cpu_c")" "(<= 0.35?)"
row "floor, in turns: null FUSE from a ring CPU / mountpoint-s3 --cache" "$(ratio "$turn_cpu_r" "$turn_cpu_c")" "(<= 0.35?)"
row "floor, in turns: null FUSE MB/s / mountpoint-s3 --cache" "$(ratio "$turn_null" "$turn_warm_c")" "(>= 2.5?)"
row "floor, in turns: null FUSE from a ring MB/s / mountpoint-s3 --cache" "$(ratio "$turn_ring" "$turn_warm_c")" "(>= 2.5?)"
row "in turns: shoal mount / null FUSE, CPU per GiB" "$(ratio "$turn_cpu" "$turn_cpu_n")" "(<= 2)"
row "in turns: shoal / null FUSE, MB/s" "$(ratio "$turn_warm" "$turn_null")" "(>= 0.7)"
