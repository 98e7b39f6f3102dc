#!/usr/bin/env bash
# shoal-mount against the alternatives on this machine, in one run: a null FUSE
# filesystem (the FUSE ceiling here), the origin's own parallel ranged GETs, a local
# file from the page cache, rclone mount (--vfs-cache-mode full) and s3fs, all on
# the same origin, which is given S3-like first-byte latency and a per-connection cap.
source "$(dirname "$0")/lib.sh"
SIZE_MB=${SIZE_MB:-1024}
LATENCY_MS=${LATENCY_MS:-20}
BW=${BW:-100000000}
FIO_SECONDS=${FIO_SECONDS:-5}

need=()
for t in fio rclone s3fs fusermount3; do command -v "$t" >/dev/null || need+=("$t"); done
[ ${#need[@]} -eq 0 ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio rclone s3fs fuse3 >/dev/null; }
build

echo "seeding: ${SIZE_MB} MiB object, 4 x $((SIZE_MB / 4)) MiB, 1,000 small files, a tree of 200 x 5 files, 10,000 keys" >&2
mkdir -p "$work/seed/par" "$work/seed/small" "$work/seed/many"
head -c "${SIZE_MB}M" /dev/urandom >"$work/seed/obj.bin"
for i in 1 2 3 4; do head -c "$((SIZE_MB / 4))M" /dev/urandom >"$work/seed/par/p$i.bin"; done
head -c 4096000 /dev/urandom | split -b 4096 -a 3 -d - "$work/seed/small/f"
cp -r "$work/seed/small" "$work/seed/small2"
# A tree: 200 directories of 5 files of 2 KB, twice (one copy per mount).
for d in $(seq -w 0 199); do
  mkdir -p "$work/seed/tree/d$d"
  for f in 1 2 3 4 5; do head -c 2000 /dev/urandom >"$work/seed/tree/d$d/f$f"; done
done
cp -r "$work/seed/tree" "$work/seed/tree2"
(cd "$work/seed/many" && seq -f 'k%05g' 0 9999 | xargs touch)

start_slow_cluster 256MiB

mkdir -p "$work/shoal" "$work/shoal0" "$work/null" "$work/rclone" "$work/s3fs"
"$bin/shoal-mount" --config "$work/cluster.toml" --log-file "$work/mount.log" bench "$work/shoal"
mounts+=("$work/shoal")
# The same, without read-ahead across files: what it gains on small files.
"$bin/shoal-mount" --config "$work/cluster.toml" --prefetch-files 0 --log-file "$work/mount0.log" bench "$work/shoal0"
mounts+=("$work/shoal0")
"$bin/examples/nullfs" "$work/null" "$((SIZE_MB * 1024 * 1024))" >/dev/null 2>&1 &
pids+=($!)
mounts+=("$work/null")
wait_mounted "$work/null"

S=$work/shoal
# Sequential, one reader.
o=$("$bin/examples/cluster_read" "$work/direct.toml" s3://bench/obj.bin 2>&1 | sed -n 's/.* \([0-9.]*\) MB\/s$/\1/p')
drop_cache; cold=$(dd_rate "$S/obj.bin")
drop_cache; warm=$(dd_rate "$S/obj.bin")
reread=$(dd_rate "$S/obj.bin")
drop_cache; null=$(dd_rate "$work/null/zero")
null_reread=$(dd_rate "$work/null/zero")
cp "$work/seed/obj.bin" "$work/local.bin"; dd_rate "$work/local.bin" >/dev/null; local_pc=$(dd_rate "$work/local.bin")

# Four sequential readers at once, cold.
drop_cache
t=$(secs bash -c "for i in 1 2 3 4; do dd if=\"$S/par/p\$i.bin\" of=/dev/null bs=1M 2>/dev/null & done; wait")
par=$(awk -v s="$SIZE_MB" -v t="$t" 'BEGIN { printf "%.1f", s * 1.048576 / t }')

# Random reads (warm nodes), IOPS and p99 latency.
fio_run() {
  fio --name=r --filename="$S/obj.bin" --rw=randread --bs="$1" --ioengine=psync --direct=1 \
    --runtime="$FIO_SECONDS" --time_based --numjobs=1 --output-format=json 2>/dev/null |
    python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]["read"]; p=j["clat_ns"]["percentile"]; print("%.0f %.2f" % (j["iops"], p.get("99.000000", 0) / 1e6))' 2>/dev/null || echo "n/a n/a"
}
read -r iops4 p99_4 <<<"$(fio_run 4k)"
read -r iops64 p99_64 <<<"$(fio_run 64k)"

# 1,000 small files, and find over 10,000 keys against the bare listing.
drop_cache; small=$(secs bash -c "cat '$S'/small/* >/dev/null")
# Another copy of the files, so the nodes are as cold for it as for the first.
drop_cache; small0=$(secs bash -c "cat '$work/shoal0'/small2/* >/dev/null")
# The tree, walked by find then read by tar; the prefetch-off mount on the copy.
drop_cache; tfind=$(secs find "$S/tree"); tfind0=$(secs find "$work/shoal0/tree2")
ttar=$(secs bash -c "tar -C '$S' -cf - tree | cat >/dev/null")
ttar0=$(secs bash -c "tar -C '$work/shoal0' -cf - tree2 | cat >/dev/null")
find_t=$(secs find "$S/many")
list_t=$(secs "$bin/examples/s3_get" "$work/direct.toml" ls s3://bench/many/)

# rclone (full VFS cache) and s3fs on the same origin: warm = second read.
export RCLONE_CONFIG_ORIGIN_TYPE=s3 RCLONE_CONFIG_ORIGIN_PROVIDER=Other RCLONE_CONFIG_ORIGIN_ENDPOINT="http://$origin" \
  RCLONE_CONFIG_ORIGIN_ACCESS_KEY_ID="$ORIGIN_KEY" RCLONE_CONFIG_ORIGIN_SECRET_ACCESS_KEY="$SHOAL_ORIGIN_SECRET_KEY"
(unset AWS_CA_BUNDLE; rclone mount origin:bench "$work/rclone" --vfs-cache-mode full --cache-dir "$work/rclone-cache" \
  --daemon --log-file "$work/rclone.log") && mounts+=("$work/rclone") && { wait_mounted "$work/rclone" || true; }
printf '%s:%s\n' "$ORIGIN_KEY" "$SHOAL_ORIGIN_SECRET_KEY" >"$work/s3fs.passwd"; chmod 600 "$work/s3fs.passwd"
s3fs bench "$work/s3fs" -o url="http://$origin" -o use_path_request_style -o passwd_file="$work/s3fs.passwd" \
  -o endpoint=us-east-1 2>"$work/s3fs.log" && mounts+=("$work/s3fs") && { wait_mounted "$work/s3fs" || true; }
rc=n/a; s3=n/a; rc_small=n/a; s3_small=n/a
if mountpoint -q "$work/rclone"; then
  dd_rate "$work/rclone/obj.bin" >/dev/null; drop_cache; rc=$(dd_rate "$work/rclone/obj.bin")
  rc_small=$(secs bash -c "cat '$work/rclone'/small/* >/dev/null")
fi
if mountpoint -q "$work/s3fs"; then
  dd_rate "$work/s3fs/obj.bin" >/dev/null; drop_cache; s3=$(dd_rate "$work/s3fs/obj.bin")
  drop_cache; s3_small=$(secs bash -c "cat '$work/s3fs'/small/* >/dev/null")
fi

echo "mount: ${SIZE_MB} MiB sequential (dd bs=1M), 3 nodes, origin +${LATENCY_MS} ms first byte, $((BW / 1000000)) MB/s per connection"
printf '%-52s %12s %14s\n' "measure" "value" "ratio"
row() { printf '%-52s %12s %14s\n' "$1" "$2" "$3"; }
row "shoal cold sequential MB/s" "$cold" "$(ratio "$cold" "$o") x origin-parallel"
row "shoal warm sequential (node RAM) MB/s" "$warm" "$(ratio "$warm" "$null") x null-FUSE"
row "shoal re-read, page cache kept, MB/s" "$reread" "$(ratio "$reread" "$local_pc") x local-pagecache"
row "shoal 4 parallel cold readers, total MB/s" "$par" "$(ratio "$par" "$o") x origin-parallel"
row "shoal warm vs rclone (vfs full, warm) MB/s" "$warm" "$(ratio "$warm" "$rc") x rclone"
row "shoal warm vs s3fs (warm) MB/s" "$warm" "$(ratio "$warm" "$s3") x s3fs"
row "4 KiB random read IOPS / p99 ms" "$iops4" "p99 ${p99_4} ms"
row "64 KiB random read IOPS / p99 ms" "$iops64" "p99 ${p99_64} ms"
row "1,000 small files s: shoal / prefetch off" "$small / $small0" "$(ratio "$small0" "$small") x faster"
row "1,000 small files s: rclone / s3fs" "$rc_small / $s3_small" "shoal $(ratio "$rc_small" "$small") x faster"
row "find over 200 directories s: shoal / prefetch off" "$tfind / $tfind0" "$(ratio "$tfind0" "$tfind") x faster"
row "tar of those 200 x 5 files s: shoal / prefetch off" "$ttar / $ttar0" "$(ratio "$ttar0" "$ttar") x faster"
row "find over 10,000 keys s / bare ListObjectsV2 s" "$find_t" "$(ratio "$find_t" "$list_t") x listing"
echo "baselines: origin parallel ranged GETs $o MB/s; null FUSE $null MB/s (page-cache re-read $null_reread MB/s); local page cache $local_pc MB/s; rclone $rc MB/s; s3fs $s3 MB/s"
