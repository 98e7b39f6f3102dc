#!/usr/bin/env bash
# One Python process reading one object from start to end through shoal://
# (the Python package: python/), against the same object read through a
# shoal-mount on the same nodes (dd) and through a gateway node with boto3, in
# one run. Each reads an object of its own cold (every tier cold: its blocks
# come from the origin through the owners), then again warm (owners hold it;
# the page cache dropped). MB/s, and CPU milliseconds per GiB of the reading
# side: the Python process for shoal://; dd and the mount daemon for the mount;
# the Python process and the gateway node for boto3 (the owner nodes' CPU is
# the same for all three and left out). Needs root (drop_cache); installs the
# package (pip install ./python) where it is missing.
source "$(dirname "$0")/lib.sh"
SIZE_MB=${SIZE_MB:-1024}
LATENCY_MS=${LATENCY_MS:-20}
BW=${BW:-0}
CHUNK_MB=${CHUNK_MB:-8}

build
python3 -c 'import boto3' 2>/dev/null || python3 -m pip install --quiet boto3
python3 -c 'import shoal.fs' 2>/dev/null || python3 -m pip install --quiet "$root/python"
mkdir -p "$work/seed" "$work/mnt"
for k in py mnt gw; do head -c "${SIZE_MB}M" /dev/urandom >"$work/seed/$k.bin"; done
size=$((SIZE_MB * 1024 * 1024))
NODE_RAM=${NODE_RAM:-$((SIZE_MB * 2))MiB} start_slow_cluster "256MiB"
cluster_section=$(sed -n '/^\[cluster\]/,/^\[cache\]/p' "$work/cluster.toml" | sed '$d')
start_node gw "$cluster_section"; gw=$node

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

py_read() { python3 "$work/read.py" shoal "$work/cluster.toml" "$1" "$CHUNK_MB"; }
gw_read() {
  local before after out
  before=$(cpu_ticks "${node_pids[-1]}")
  out=$(python3 "$work/read.py" boto3 "$gw" "$1" "$CHUNK_MB" "$NODE_KEY" "$NODE_SECRET")
  after=$(cpu_ticks "${node_pids[-1]}")
  echo "$out $((after - before))"
}
"$bin/shoal-mount" --config "$work/cluster.toml" --log-file "$work/mount.log" bench "$work/mnt"
mounts+=("$work/mnt")
wait_mounted "$work/mnt"
# The mount's processes: the only ones naming this run's mountpoint.
mount_pids=$(pgrep -f -- "$work/mnt" | tr '\n' ' ')
mnt_read() {
  local before after ms t0 t1
  before=$(cpu_ticks $mount_pids)
  t0=$(date +%s.%N)
  ms=$(cpu_run /dev/null dd if="$work/mnt/$1" of=/dev/null bs="${CHUNK_MB}M" 2>/dev/null)
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
  drop_cache; read -r r c n t <<<"$(gw_read gw.bin)"
  row "boto3 through a gateway ($pass)" "$r" "$(ms_of_gib "$((c + t * 1000 / $(getconf CLK_TCK)))" "$n")"
done
