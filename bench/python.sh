#!/usr/bin/env bash
# One Python process reading one object from start to end through shoal://
# (the Python package: python/), against the same object read through a
# shoal-mount on the same nodes (dd) and with boto3 through a gateway node, in
# one run. Each reads an object of its own cold (every tier cold: its blocks
# come from the origin through the owners), then again warm (owners hold it;
# the page cache dropped). MB/s, and CPU milliseconds per GiB of the reading
# side: the Python process for shoal://; dd and the mount daemon for the mount;
# the Python process and the gateway node for boto3 (the owner nodes' CPU is
# left out).
#
# Two gateways: one whose RAM tier (GW_RAM, 64 MiB) cannot hold the object, so
# that a warm read through it is the extra hop a gateway is (its bytes come
# from the owners); and one whose RAM tier holds the whole object, so that its
# warm read is one node's RAM streamed over one connection, with the owners
# idle (their CPU, spent for the other readers, is not spent here at all).
#
# Then training-shaped reads on a cluster of their own (bench/training.py):
# WORKERS (4) DataLoader workers over SMALL (2,000) objects of 128 KiB in
# batches of 64, and over SHARDS (8) tar shards of SHARD_MB (256) MiB
# streamed (members of 128 KiB), each read by shoal:// by keys and by prefix
# cold then warm (a new process on warm nodes), s3fs against the origin and
# boto3 against the origin: samples/s, CPU ms per sample of the reading
# processes, origin requests; for shards each worker's RSS before its first
# read and at its peak, and how far into its first shard its first sample
# came. torch's DataLoader where torch is installed (TORCH=1 installs it with
# pip), else the tests' stand-in for it. Then one warm batch of 64 read with
# __getitems__ against the same 64 read one by one.
#
# Services on core $SERVICE_CPUS (0), readers on $READER_CPUS (1). Needs root
# (drop_cache); installs the package (pip install ./python) where it is
# missing.
source "$(dirname "$0")/lib.sh"
SIZE_MB=${SIZE_MB:-1024}
LATENCY_MS=${LATENCY_MS:-20}
BW=${BW:-0}
CHUNK_MB=${CHUNK_MB:-8}
WORKERS=${WORKERS:-4}
SMALL=${SMALL:-2000}
SHARDS=${SHARDS:-8}
SHARD_MB=${SHARD_MB:-256}
SERVICE_CPUS=${SERVICE_CPUS:-0}
READER_CPUS=${READER_CPUS:-1}
export ORIGIN_CPUS=$SERVICE_CPUS NODE_CPUS=$SERVICE_CPUS
pin() { taskset -c "$READER_CPUS" "$@"; }

build
python3 -c 'import boto3' 2>/dev/null || python3 -m pip install --quiet boto3
python3 -c 'import s3fs' 2>/dev/null || python3 -m pip install --quiet s3fs
python3 -c 'import shoal.fs' 2>/dev/null || python3 -m pip install --quiet --no-build-isolation "$root/python"
if [ "${TORCH:-0}" = 1 ]; then python3 -c 'import torch' 2>/dev/null || python3 -m pip install --quiet torch; fi
# BIG=0 skips the big object's table (the training reads only); TRAIN=0 the
# training reads.
if [ "${BIG:-1}" = 1 ]; then
mkdir -p "$work/seed" "$work/mnt"
for k in py mnt gw gwram; do head -c "${SIZE_MB}M" /dev/urandom >"$work/seed/$k.bin"; done
size=$((SIZE_MB * 1024 * 1024))
NODE_RAM=${NODE_RAM:-$((SIZE_MB * 2))MiB} start_slow_cluster "256MiB"
cluster_section=$(sed -n '/^\[cluster\]/,/^\[cache\]/p' "$work/cluster.toml" | sed '$d')
# shoal:// reads with a Python process's own default RAM tier (the config
# names none), the mount with its 256 MiB.
sed '/^\[cache\]/,$d' "$work/cluster.toml" >"$work/py.toml"
NODE_RAM=${GW_RAM:-64MiB} start_node gw "$cluster_section"; gw=$node gw_pid=${node_pids[-1]}
start_node gwram "$cluster_section"; gwram=$node gwram_pid=${node_pids[-1]}

# read.py MODE TARGET KEY: reads the object in CHUNK_MB reads; prints MB/s and
# the process's CPU ms.
cat >"$work/read.py" <<'PY'
import resource, sys, time
mode, target, key = sys.argv[1:4]
chunk = int(sys.argv[4]) << 20
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
if mode == "shoal":
    from shoal.fs import ShoalFileSystem
    f = ShoalFileSystem(config=target).open(f"bench/{key}")
    read = f.read
else:
    import boto3
    from botocore.config import Config
    s3 = boto3.client("s3", endpoint_url=f"http://{target}", aws_access_key_id=sys.argv[5],
                      aws_secret_access_key=sys.argv[6], region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"}))
    body = s3.get_object(Bucket="bench", Key=key)["Body"]
    read = body.read
c0, t0, n = cpu(), time.monotonic(), 0
while True:
    b = read(chunk)
    if not b:
        break
    n += len(b)
t, c = time.monotonic() - t0, cpu() - c0
print(f"{n / t / 1e6:.1f} {c * 1000:.0f} {n}")
PY

py_read() { pin python3 "$work/read.py" shoal "$work/py.toml" "$1" "$CHUNK_MB"; }
# gw_read ADDR PID KEY: boto3 through the gateway at ADDR (process PID).
gw_read() {
  local before after out
  before=$(cpu_ticks "$2")
  out=$(pin python3 "$work/read.py" boto3 "$1" "$3" "$CHUNK_MB" "$NODE_KEY" "$NODE_SECRET")
  after=$(cpu_ticks "$2")
  echo "$out $((after - before))"
}
pin "$bin/shoal-mount" --config "$work/cluster.toml" --log-file "$work/mount.log" bench "$work/mnt"
mounts+=("$work/mnt")
wait_mounted "$work/mnt"
# The mount's processes: the only ones naming this run's mountpoint.
mount_pids=$(pgrep -f -- "$work/mnt" | tr '\n' ' ')
mnt_read() {
  local before after ms t0 t1
  before=$(cpu_ticks $mount_pids)
  t0=$(date +%s.%N)
  ms=$(cpu_run /dev/null taskset -c "$READER_CPUS" dd if="$work/mnt/$1" of=/dev/null bs="${CHUNK_MB}M" 2>/dev/null)
  t1=$(date +%s.%N)
  after=$(cpu_ticks $mount_pids)
  awk -v s="$size" -v a="$t0" -v b="$t1" -v ms="$ms" -v ticks=$((after - before)) -v hz="$(getconf CLK_TCK)" \
    'BEGIN { printf "%.1f %.0f", s / (b - a) / 1e6, ms + ticks * 1000 / hz }'
}

row() { printf '%-40s %10s %14s\n' "$1" "$2" "$3"; }
echo "python: one reader of a ${SIZE_MB} MiB object in ${CHUNK_MB} MiB reads; 3 nodes; origin +${LATENCY_MS} ms first byte"
row "" "MB/s" "CPU ms/GiB"
for pass in cold warm; do
  drop_cache; read -r r c n <<<"$(py_read py.bin)"
  row "shoal:// ($pass)" "$r" "$(ms_of_gib "$c" "$n")"
  drop_cache; read -r r c <<<"$(mnt_read mnt.bin)"
  row "shoal-mount + dd ($pass)" "$r" "$(ms_of_gib "$c" "$size")"
  drop_cache; read -r r c n t <<<"$(gw_read "$gw" "$gw_pid" gw.bin)"
  row "boto3 through a gateway ($pass)" "$r" "$(ms_of_gib "$((c + t * 1000 / $(getconf CLK_TCK)))" "$n")"
  drop_cache; read -r r c n t <<<"$(gw_read "$gwram" "$gwram_pid" gwram.bin)"
  row "boto3, the gateway's RAM ($pass)" "$r" "$(ms_of_gib "$((c + t * 1000 / $(getconf CLK_TCK)))" "$n")"
done
fi

# TRAIN=0 stops here (the big object's table only).
[ "${TRAIN:-1}" = 1 ] || exit 0

# Training-shaped reads, on a cluster of their own: the first one's processes
# and data go first.
for m in "${mounts[@]}"; do fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
mounts=()
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=(); node_pids=(); node_addrs=()
rm -rf "$work/seed"; mkdir -p "$work/seed"
python3 - "$work/seed" "$SMALL" "$SHARDS" "$SHARD_MB" <<'PY'
import io, os, sys, tarfile
seed, small, shards, shard_mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.makedirs(f"{seed}/small")
for i in range(small):
    with open(f"{seed}/small/{i:05d}.bin", "wb") as f:
        f.write(os.urandom(128 << 10))
os.makedirs(f"{seed}/shards")
for s in range(shards):
    with tarfile.open(f"{seed}/shards/{s:02d}.tar", "w") as t:
        for m in range((shard_mb << 20) // ((128 << 10) + 512)):
            info = tarfile.TarInfo(f"{s:02d}/{m:05d}.bin")
            info.size = 128 << 10
            t.addfile(info, io.BytesIO(os.urandom(info.size)))
PY
shard_bytes=$(stat -c %s "$work/seed/shards/00.tar")
rm -f "$work/origin.addr"
start_origin "$work/seed" --first-byte-delay-ms "$LATENCY_MS" --bandwidth "$BW"
ids=()
# The bench's key may purge: a cold run starts from nodes that hold nothing.
for i in 1 2 3; do
  NODE_RAM=${TRAIN_NODE_RAM:-1536MiB} start_node "t$i" 'allow = ["read:*", "list:*", "purge:*"]'
  ids+=("\"$node\"")
done
# The readers' config names no RAM tier: each process gets the default.
cat >"$work/cluster.toml" <<TOML
[origin]
endpoint = "http://$origin"
[origin.credentials]
access_key_id = "$ORIGIN_KEY"
secret_access_key_env = "SHOAL_ORIGIN_SECRET_KEY"
[cluster]
nodes = [$(IFS=,; echo "${ids[*]}")]
[cluster.credentials]
access_key_id = "$NODE_KEY"
secret_access_key = "$NODE_SECRET"
TOML
purge_cluster() { "$bin/shoal" --config "$work/cluster.toml" purge "s3://bench/" >/dev/null; }

stub=$root/python/tests/torchstub
python3 -c 'import torch' 2>/dev/null && loader="torch's DataLoader" || loader="the stand-in DataLoader (no torch here)"
train() { # READER SHAPE: the line training.py prints
  local keys a
  keys=$(cd "$work/seed/$2" && ls | python3 -c "import json,sys; print(json.dumps(['$2/' + l.strip() for l in sys.stdin]))")
  a=$(printf '{"config":"%s","origin":"%s","origin_key":"%s","origin_secret":"%s","prefix":"bench/%s","keys":%s,"workers":%s,"batch":%s}' \
    "$work/cluster.toml" "$origin" "$ORIGIN_KEY" "$SHOAL_ORIGIN_SECRET_KEY" "$2" "$keys" "$WORKERS" 64)
  PYTHONPATH="$(python3 -c 'import torch' 2>/dev/null || echo "$stub")" pin python3 "$root/bench/training.py" "$1" "$2" <<<"$a"
}
trow() { printf '%-36s %10s %14s %10s %16s %s\n' "$@"; }
echo
echo "training: $WORKERS workers ($loader) on core $READER_CPUS; services on core $SERVICE_CPUS; origin +${LATENCY_MS} ms first byte"
echo "$SMALL objects of 128 KiB in batches of 64 (shoal:// with __getitems__); $SHARDS tar shards of $SHARD_MB MiB streamed (members of 128 KiB)"
trow "" "samples/s" "CPU ms/sample" "origin req" "RSS MiB start/peak" "first sample at (bytes of $shard_bytes)"
declare -A rate
for shape in small shards; do
  for run in "shoal-keys cold" "shoal-keys warm" "shoal-prefix cold" "shoal-prefix warm" "s3fs -" "boto3 -"; do
    read -r reader pass <<<"$run"
    [ "$pass" = cold ] && purge_cluster
    drop_cache
    read -r n t c o rss at <<<"$(train "$reader" "$shape")"
    r=$(awk -v n="$n" -v t="$t" 'BEGIN { printf "%.0f", n / t }')
    label="$shape: ${reader/shoal-/shoal:// by } ${pass/-/against the origin}"
    [ "$reader" = s3fs ] || [ "$reader" = boto3 ] && label="$shape: $reader against the origin"
    rate["$shape $reader $pass"]=$r
    trow "$label" "$r" "$(awk -v c="$c" -v n="$n" 'BEGIN { printf "%.2f", c * 1000 / n }')" "$o" "$rss" "$at"
  done
done
read -r one many <<<"$(train shoal-single small)"
echo
echo "one warm batch of 64 objects of 128 KiB, one process: 64 reads one by one $one samples/s, __getitems__ $many samples/s: $(ratio "$many" "$one")x"
echo "small objects, shoal:// against s3fs (samples/s): by keys warm $(ratio "${rate[small shoal-keys warm]}" "${rate[small s3fs -]}")x (target >= 20), cold $(ratio "${rate[small shoal-keys cold]}" "${rate[small s3fs -]}")x (target >= 3); by prefix warm $(ratio "${rate[small shoal-prefix warm]}" "${rate[small s3fs -]}")x, cold $(ratio "${rate[small shoal-prefix cold]}" "${rate[small s3fs -]}")x"
