#!/usr/bin/env bash
# Metadata at fleet scale, in one run: a tree of DIRS x PER_DIR objects on the
# test origin with LATENCY_MS before every answer (S3's LIST pages take about
# that), walked by MOUNTS mounts with `find . -type f | xargs stat`, first one
# after another, then all at once (fresh mounts, the cluster's metadata purged
# first), for shoal (metadata through the cluster), shoal with `--metadata
# origin` (each mount lists the origin itself) and mountpoint-s3 (one mount, then
# MOUNTS at once, `--metadata-ttl 300`). Prints origin LIST and HEAD requests and
# every walk's time, and the ratios the project holds itself to.
#
# Services (origin, 3 nodes) run on core 0, mounts and their walkers on core 1.
# Knobs: DIRS (200), PER_DIR (100), LATENCY_MS (50), MOUNTS (8), MOUNT_S3 (path
# of a mountpoint-s3 build; default ../shared/peers/mount-s3), WALK_LIMIT (600 s
# per walk before it is reported as timed out).
source "$(dirname "$0")/lib.sh"
DIRS=${DIRS:-200}
PER_DIR=${PER_DIR:-100}
LATENCY_MS=${LATENCY_MS:-50}
MOUNTS=${MOUNTS:-8}
WALK_LIMIT=${WALK_LIMIT:-600}
MOUNT_S3=${MOUNT_S3:-$root/../shared/peers/mount-s3}
SERVICES=0
READER=1
[ "$(nproc)" -ge 2 ] || { SERVICES=0; READER=0; }

command -v fusermount3 >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 >/dev/null; }
have_ms3=0
if [ -x "$MOUNT_S3" ]; then
  [ -e /usr/lib/x86_64-linux-gnu/libfuse.so.2 ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfuse2 >/dev/null; }
  have_ms3=1
fi
build

echo "seeding: $DIRS directories of $PER_DIR objects" >&2
python3 - "$work/seed/tree" "$DIRS" "$PER_DIR" <<'PY'
import os, sys
root, dirs, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for d in range(dirs):
    p = os.path.join(root, f"dir-{d:04}")
    os.makedirs(p)
    for f in range(per):
        with open(os.path.join(p, f"file-{f:05}.dat"), "wb") as out:
            out.write(b"x" * (f % 97))
PY
start_origin "$work/seed" --first-byte-delay-ms "$LATENCY_MS"
taskset -a -cp "$SERVICES" "${pids[-1]}" >/dev/null
export NODE_CPUS=$SERVICES NODE_CACHE='metadata_ttl = "10m"'
ids=()
# The bench's key purges the cluster between runs: purge is granted by name.
for i in 1 2 3; do start_node "n$i" 'allow = ["read:*", "list:*", "purge:*"]'; ids+=("\"$node\""); done
nodes=$(IFS=,; echo "${ids[*]}")
cat >"$work/mount.toml" <<TOML
[origin]
endpoint = "http://$origin"
[origin.credentials]
access_key_id = "$ORIGIN_KEY"
secret_access_key_env = "SHOAL_ORIGIN_SECRET_KEY"
[cluster]
nodes = [$nodes]
[cluster.credentials]
access_key_id = "$NODE_KEY"
secret_access_key = "$NODE_SECRET"
[cache]
ram_size = "64MiB"
[mount]
metadata_ttl = "5m"
TOML

# origin_counts: "LISTS HEADS" so far at the origin.
origin_counts() {
  curl -s "http://$origin/_origin/stats" | python3 -c '
import json, sys
r = json.load(sys.stdin)["requests"]
lists = sum(x["count"] for x in r if x["method"] == "GET" and x["bucket"] and not x["key"])
heads = sum(x["count"] for x in r if x["method"] == "HEAD" and x["key"])
print(lists, heads)'
}
# busy CORE: seconds that core has been busy (user, system, interrupts) since boot.
busy() {
  awk -v c="cpu$1" -v hz="$(getconf CLK_TCK)" '$1 == c { printf "%.2f", ($2 + $3 + $4 + $7 + $8 + $9) / hz }' /proc/stat
}
# delta BEFORE AFTER: "LISTS HEADS" between two origin_counts.
delta() { echo "$1 $2" | awk '{ print $3 - $1, $4 - $2 }'; }

mkdir -p "$work/mnt"
# Mount points are made in a subshell ($(...)), so they are recorded in a file
# for the cleanup, not in $mounts.
made="$work/mounts"; : >"$made"
# mount_shoal ARGS...: a new shoal mount on the reader core; prints its path.
mount_shoal() {
  local m
  m=$(mktemp -d "$work/mnt/shoal.XXXX")
  taskset -c "$READER" "$bin/shoal-mount" --config "$work/mount.toml" --log-file "$m.log" "$@" \
    bench/tree "$m" >/dev/null
  echo "$m" >>"$made"
  echo "$m"
}
# mount_ms3: a new mountpoint-s3 mount on the reader core; prints its path.
mount_ms3() {
  local m
  m=$(mktemp -d "$work/mnt/ms3.XXXX")
  AWS_ACCESS_KEY_ID=$ORIGIN_KEY AWS_SECRET_ACCESS_KEY=$SHOAL_ORIGIN_SECRET_KEY taskset -c "$READER" \
    "$MOUNT_S3" bench "$m" --prefix tree/ --endpoint-url "http://$origin" --force-path-style \
    --region us-east-1 --metadata-ttl 300 >"$m.log" 2>&1
  echo "$m" >>"$made"
  wait_mounted "$m" >/dev/null
  echo "$m"
}
want=$((DIRS * PER_DIR))
# walk DIR: seconds of `find . -type f | xargs stat` over the mount; checks it
# saw every object.
walk() {
  local t0 t1 n
  t0=$(date +%s.%N)
  n=$(cd "$1" && timeout "$WALK_LIMIT" bash -c 'find . -type f | tee >(wc -l >&3) | xargs -d "\n" stat >/dev/null' 3>&1) ||
    { echo "walk of $1 failed or passed ${WALK_LIMIT}s" >&2; echo "timeout"; return 0; }
  t1=$(date +%s.%N)
  [ "$n" -eq "$want" ] || { echo "walk of $1 saw $n files, not $want" >&2; exit 1; }
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }'
}
# walks_in_turn LABEL MOUNT_FN [ARGS]: MOUNTS mounts made, then walked one after
# another; sets $turn_times, $turn_cost ("LISTS HEADS" of all walks), $first_cost.
walks_in_turn() {
  local fn=$1; shift
  local ms=() m before after mid i
  for i in $(seq "$MOUNTS"); do ms+=("$($fn "$@")"); done
  turn_times=()
  before=$(origin_counts)
  local c0
  c0=$(busy "$READER")
  for i in $(seq "$MOUNTS"); do
    turn_times+=("$(walk "${ms[$((i - 1))]}")")
    if [ "$i" = 1 ]; then
      mid=$(origin_counts); first_cost="$(delta "$before" "$mid") $(awk -v a="$c0" -v b="$(busy "$READER")" 'BEGIN { printf "%.2f", b - a }')"
    fi
  done
  after=$(origin_counts)
  turn_cost="$(delta "$before" "$after") $(awk -v a="$c0" -v b="$(busy "$READER")" 'BEGIN { printf "%.2f", b - a }')"
}
# walks_at_once MOUNT_FN [ARGS]: MOUNTS fresh mounts walked at the same time;
# sets $once_times (each walk's) and $once_cost.
walks_at_once() {
  local fn=$1; shift
  local ms=() before after i jobs=()
  for i in $(seq "$MOUNTS"); do ms+=("$($fn "$@")"); done
  before=$(origin_counts)
  local c0
  c0=$(busy "$READER")
  for i in $(seq "$MOUNTS"); do (walk "${ms[$((i - 1))]}" >"$work/once.$i") & jobs+=($!); done
  wait "${jobs[@]}"
  once_times=()
  for i in $(seq "$MOUNTS"); do once_times+=("$(cat "$work/once.$i")"); done
  after=$(origin_counts)
  once_cost="$(delta "$before" "$after") $(awk -v a="$c0" -v b="$(busy "$READER")" 'BEGIN { printf "%.2f", b - a }')"
}
# purge_cluster: forget every listing the nodes keep, so the next walk is cold.
purge_cluster() {
  "$bin/shoal" --config "$work/mount.toml" purge "s3://bench/" >/dev/null
}
unmount_all() {
  local m
  while read -r m; do fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m" 2>/dev/null || true; done <"$made"
  : >"$made"
}
trap 'unmount_all; cleanup' EXIT
max() { printf '%s\n' "$@" | grep -v timeout | sort -g | tail -1; }
mean_rest() { shift; printf '%s\n' "$@" | awk '$1 != "timeout" { s += $1; n++ } END { if (n) printf "%.2f", s / n; else print "n/a" }'; }
row() { printf '%-34s %7s %7s %9s  %s\n' "$@"; }

# The walker's own cost: the same walk over the seed tree on local disk (page
# cache warm), alone and MOUNTS at once on the reader core.
local_walk() { taskset -c "$READER" bash -c "$(declare -f walk); want=$want WALK_LIMIT=$WALK_LIMIT; walk $1"; }
echo "local baseline" >&2
c0=$(busy "$READER"); lc_one=$(local_walk "$work/seed/tree")
lc_one_cpu=$(awk -v a="$c0" -v b="$(busy "$READER")" 'BEGIN { printf "%.2f", b - a }')
c0=$(busy "$READER"); jobs=()
for i in $(seq "$MOUNTS"); do (local_walk "$work/seed/tree" >"$work/local.$i") & jobs+=($!); done
wait "${jobs[@]}"
lc_once=(); for i in $(seq "$MOUNTS"); do lc_once+=("$(cat "$work/local.$i")"); done
lc_once_cpu=$(awk -v a="$c0" -v b="$(busy "$READER")" 'BEGIN { printf "%.2f", b - a }')

echo "shoal, metadata through the cluster" >&2
walks_in_turn mount_shoal
sh_turn=("${turn_times[@]}"); sh_turn_cost=$turn_cost; sh_first_cost=$first_cost
unmount_all; purge_cluster
walks_at_once mount_shoal
sh_once=("${once_times[@]}"); sh_once_cost=$once_cost
unmount_all
# The same with the cluster warm: what 8 walks at once cost the one reader core
# when no origin request is waited for (the floor of the cold run above).
walks_at_once mount_shoal
sh_warm_once=("${once_times[@]}"); sh_warm_once_cost=$once_cost
unmount_all

echo "shoal, --metadata origin" >&2
walks_in_turn mount_shoal --metadata origin
or_turn=("${turn_times[@]}"); or_turn_cost=$turn_cost; or_first_cost=$first_cost
unmount_all
walks_at_once mount_shoal --metadata origin
or_once=("${once_times[@]}"); or_once_cost=$once_cost
unmount_all

ms_one=n/a; ms_one_cost="n/a n/a n/a"; ms_once=(); ms_once_cost="n/a n/a n/a"
if [ "$have_ms3" = 1 ]; then
  echo "mountpoint-s3" >&2
  m=$(mount_ms3); before=$(origin_counts); c0=$(busy "$READER"); ms_one=$(walk "$m")
  ms_one_cost="$(delta "$before" "$(origin_counts)") $(awk -v a="$c0" -v b="$(busy "$READER")" 'BEGIN { printf "%.2f", b - a }')"
  unmount_all
  walks_at_once mount_ms3
  ms_once=("${once_times[@]}"); ms_once_cost=$once_cost
  unmount_all
fi

echo
echo "== metadata: $want objects in $DIRS directories, origin +${LATENCY_MS} ms per answer, $MOUNTS mounts (services on core $SERVICES, mounts on core $READER)"
row "" "LISTs" "HEADs" "core $READER s" "walk seconds"
read -r l h c <<<"$sh_first_cost"; row "shoal: first walk" "$l" "$h" "$c" "${sh_turn[0]}"
read -r l h c <<<"$sh_turn_cost"; row "shoal: $MOUNTS walks in turn" "$l" "$h" "$c" "${sh_turn[*]}"
read -r l h c <<<"$sh_once_cost"; row "shoal: $MOUNTS walks at once (cold)" "$l" "$h" "$c" "${sh_once[*]}"
read -r l h c <<<"$sh_warm_once_cost"; row "shoal: $MOUNTS at once (cluster warm)" "$l" "$h" "$c" "${sh_warm_once[*]}"
read -r l h c <<<"$or_first_cost"; row "shoal --metadata origin: first" "$l" "$h" "$c" "${or_turn[0]}"
read -r l h c <<<"$or_turn_cost"; row "shoal --metadata origin: in turn" "$l" "$h" "$c" "${or_turn[*]}"
read -r l h c <<<"$or_once_cost"; row "shoal --metadata origin: at once" "$l" "$h" "$c" "${or_once[*]}"
row "local disk: one walk" - - "$lc_one_cpu" "$lc_one"
row "local disk: $MOUNTS at once" - - "$lc_once_cpu" "${lc_once[*]}"
read -r l h c <<<"$ms_one_cost"; row "mountpoint-s3: one mount" "$l" "$h" "$c" "$ms_one"
read -r l h c <<<"$ms_once_cost"; row "mountpoint-s3: $MOUNTS at once" "$l" "$h" "$c" "${ms_once[*]:-n/a}"
echo
read -r one_l _ <<<"$sh_first_cost"; read -r all_l _ <<<"$sh_turn_cost"
echo "origin LISTs, $MOUNTS mounts in turn / one mount: $(ratio "$all_l" "$one_l") (target <= 1.1; --metadata origin: $(ratio "$(cut -d' ' -f1 <<<"$or_turn_cost")" "$(cut -d' ' -f1 <<<"$or_first_cost")"))"
echo "walks 2-$MOUNTS / the first, slowest of them: $(ratio "$(max "${sh_turn[@]:1}")" "${sh_turn[0]}") (target <= 0.5; mean $(ratio "$(mean_rest "${sh_turn[@]}")" "${sh_turn[0]}"); --metadata origin: $(ratio "$(max "${or_turn[@]:1}")" "${or_turn[0]}"))"
# The walker's own work (find's getdents, stat's 20,000 calls, answered by the
# kernel from what READDIRPLUS gave it) is the same in every walk and is most of
# a warm one: the local walk is that floor. What the mount adds, later / first:
above() { awk -v a="$1" -v l="$lc_one" 'BEGIN { printf "%.2f", a - l }'; }
echo "  above the local walk ($lc_one s), walks 2-$MOUNTS slowest / the first: $(ratio "$(above "$(max "${sh_turn[@]:1}")")" "$(above "${sh_turn[0]}")") (the local walk alone / the first: $(ratio "$lc_one" "${sh_turn[0]}"))"
echo "$MOUNTS walks at once / one walk alone, slowest: $(ratio "$(max "${sh_once[@]}")" "${sh_turn[0]}") (target <= 2; --metadata origin: $(ratio "$(max "${or_once[@]}")" "${or_turn[0]}"))"
echo "  reader core busy for $MOUNTS walks at once: $(cut -d' ' -f3 <<<"$sh_once_cost") s cold, $(cut -d' ' -f3 <<<"$sh_warm_once_cost") s warm; for one walk alone: $(cut -d' ' -f3 <<<"$sh_first_cost") s"
echo "  $MOUNTS walks at once over local disk / one alone: $(ratio "$(max "${lc_once[@]}")" "$lc_one"); shoal cold at once / local disk at once: $(ratio "$(max "${sh_once[@]}")" "$(max "${lc_once[@]}")")"
echo "  cold at once / warm at once (the reader core's floor, $MOUNTS walks sharing one core): $(ratio "$(max "${sh_once[@]}")" "$(max "${sh_warm_once[@]}")")"
if [ "$have_ms3" = 1 ]; then
  echo "mountpoint-s3 $MOUNTS at once / one alone, slowest: $(ratio "$(max "${ms_once[@]}")" "$ms_one"); its LISTs $MOUNTS at once / one: $(ratio "$(cut -d' ' -f1 <<<"$ms_once_cost")" "$(cut -d' ' -f1 <<<"$ms_one_cost")")"
fi
