#!/usr/bin/env bash
# The container image as users get it, with no registry and no container
# runtime: built by packaging/container/build.sh (buildah), unpacked by umoci
# into its root and config, and run as the StatefulSet runs the node (its own
# mount and PID namespaces, the image's user, a read-only root, the config and
# cache mounted, no privilege escalation);
# its static shoal-mount mounting a bucket and reading it from a root that has
# no C library at all. The CSI plugin's container runs in a booted system
# (packaging/system/image.sh), from the root unpacked here.
# Run as root; called by packaging/test.sh. Prints "image: N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
passed=0; failed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }
check() { local what=$1; shift; if "$@" >"$work/check.log" 2>&1; then ok "$what"; else bad "$what"; sed 's/^/     /' "$work/check.log" | tail -20; fi; }
summary() { echo "image: $passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }
ms() { echo $((($(date +%s%N) - $1) / 1000000)); }

out=${SHOAL_IMAGE_DIR:-$root/target/image}
work=$(mktemp -d /tmp/shoal-image.XXXXXX)
pids=()
bare=$work/bare
cleanup() {
  mountpoint -q "$bare/mnt" 2>/dev/null && umount -l "$bare/mnt"
  mountpoint -q "$bare/proc" 2>/dev/null && umount -l "$bare/proc"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
version=$(awk -F'"' '/^version = / { print $2; exit }' Cargo.toml)

echo "== the image, built without a registry"
start=$(date +%s%N)
if packaging/container/build.sh "$out" >"$work/build.log" 2>&1; then
  ok "packaging/container/build.sh in $(ms "$start") ms: $(tail -1 "$work/build.log")"
else
  bad "packaging/container/build.sh"; tail -20 "$work/build.log"; summary
fi
rm -rf "$out/bundle"
check "umoci unpack gives its root and config" umoci unpack --image "$out/oci:shoal:$version" "$out/bundle"
rootfs=$out/bundle/rootfs
config=$out/bundle/config.json
[ -f "$config" ] || summary
# What the runtime would run: the config's process.
jq_() { python3 -c "import json,sys; c=json.load(open('$config'))['process']; print($1)"; }
user=$(jq_ '"%d:%d" % (c["user"]["uid"], c["user"]["gid"])')
cmd=$(jq_ '" ".join(c["args"])')
check "its user is 999:999 (shoal), not root ($user)" test "$user" = 999:999
check "its command is the node's ($cmd)" test "$cmd" = "shoal-node --config /etc/shoal/node.toml"
echo "     image size: $(du -sm "$out/oci/blobs" | cut -f1) MiB as an OCI layout (compressed), $(du -sm "$rootfs" | cut -f1) MiB unpacked"
check "no compiler, shell or package manager in it" bash -c "
  found=\$(find '$rootfs' \\( -name 'gcc*' -o -name cc -o -name 'cc1*' -o -name 'rustc' -o -name cargo -o -name ld \\
    -o -name 'ld.bfd' -o -name as -o -name sh -o -name bash -o -name dash -o -name apt -o -name dpkg \\) -print)
  [ -z \"\$found\" ] || { echo \"\$found\"; exit 1; }"
check "its shoal-mount is statically linked (no interpreter, no shared library)" bash -c "
  ! readelf -l '$rootfs/usr/bin/shoal-mount' | grep -q 'program interpreter' &&
  ! readelf -d '$rootfs/usr/bin/shoal-mount' | grep -q NEEDED"
# Every program the image holds starts in it (its libraries are all there).
for b in shoal-node shoal-csi shoal shoal-mount systemd-run journalctl; do
  check "$b --version runs inside the image's root" chroot "$rootfs" "/usr/bin/$b" --version
done

echo "== origin on the host"
seed=$work/seed
mkdir -p "$seed/data"
head -c 5000013 /dev/urandom >"$seed/data/big.bin"
head -c 70001 /dev/urandom >"$seed/data/small.bin"
origin_secret=image-origin-$RANDOM$RANDOM
cluster_secret=image-cluster-$RANDOM$RANDOM
SHOAL_ORIGIN_ACCESS_KEY=image SHOAL_ORIGIN_SECRET_KEY=$origin_secret target/release/shoal-test-origin \
  --listen 127.0.39.1:0 --bucket img --seed "$seed" --addr-file "$work/origin.addr" 2>"$work/origin.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/origin.addr" ] && break; sleep 0.1; done
origin=$(cat "$work/origin.addr" 2>/dev/null)
if [ -n "$origin" ]; then ok "origin on $origin"; else bad "the origin starts"; cat "$work/origin.log"; summary; fi

echo "== the node container, as the StatefulSet runs it"
# The StatefulSet's container: the image's command as its user (runAsUser 999),
# a read-only root, the ConfigMap at /etc/shoal, the cache volume at
# /var/cache/shoal, the cluster secret and POD_IP from its environment.
mkdir -p "$work/etc-shoal" "$work/cache"
chown 999:999 "$work/cache"
cat >"$work/etc-shoal/node.toml" <<TOML
[origin]
endpoint = "http://$origin"
region = "us-east-1"
[origin.credentials]
access_key_id = "image"
secret_access_key = "$origin_secret"
[node]
listen = "127.0.39.2:0"
[cache]
ram_size = "64MiB"
disk_size = "64MiB"
data_dir = "/var/cache/shoal"
[auth]
[[auth.keys]]
access_key_id = "shoal-cluster"
secret_access_key_env = "SHOAL_CLUSTER_SECRET"
TOML
chmod 0644 "$work/etc-shoal/node.toml"
# The StatefulSet's container as the install renders it (a key of this run for
# its Secret): its command, user, root and mounts, each run as it says.
cp -r packaging/kubernetes "$work/k8s"
printf 'image-test-key' >"$work/k8s/base/cluster-secret-key"
kubectl kustomize "$work/k8s" >"$work/install.yaml" 2>"$work/kustomize.log" &&
  python3 packaging/system/image-pod.py StatefulSet shoal-node shoal-node <"$work/install.yaml" >"$work/pod.sh" ||
  { bad "the StatefulSet's container from kubectl kustomize packaging/kubernetes"; cat "$work/kustomize.log"; summary; }
# shellcheck disable=SC1091
source "$work/pod.sh"
check "the StatefulSet runs the image's command (${ARGS[*]}) as its user ($RUN_AS), not privileged, read-only root, no escalation" \
  test "${ARGS[*]}" = "$cmd" -a "$RUN_AS" = "${user%%:*}" -a "$PRIVILEGED" = false -a "$READ_ONLY_ROOT" = true -a "$NO_NEW_PRIVS" = true
# Its volumes: the ConfigMap's files and the cache's emptyDir.
binds=()
for m in "${MOUNTS[@]}"; do
  read -r path _ mode kind <<<"$m"
  case $kind in
    configMap) binds+=("$work/etc-shoal:$path:$mode") ;;
    emptyDir) binds+=("$work/cache:$path:$mode") ;;
    *) bad "the node's volume $path is a $kind, which this test cannot give"; summary ;;
  esac
done
# A runtime's work by hand (systemd-nspawn resolves a --user with the image's
# getent, which the image has no need of): a mount and PID namespace of its
# own, the root read-only as the container says (and no /tmp then: a pod has
# none it can write), the volumes bound in, proc and a /dev; then no_new_privs
# as it says, and its user by chroot --userspec, which leaves the process no
# capability. The environment is the pod's alone.
$READ_ONLY_ROOT && ro=ro || ro=rw
$NO_NEW_PRIVS && nnp=--no-new-privs || nnp=--
start=$(date +%s%N)
env -i PATH=/usr/bin SHOAL_CLUSTER_SECRET="$cluster_secret" POD_IP=127.0.39.2 RUST_LOG=info \
  unshare --mount --pid --fork --kill-child --propagation private -- /bin/bash -c '
    set -e; r=$1; ro=$2; binds=$3; shift 3
    mount --bind "$r" "$r"; mount -o "remount,bind,$ro" "$r"
    for b in $binds; do
      IFS=: read -r src dst mode <<<"$b"
      mount --bind "$src" "$r$dst"; mount -o "remount,bind,$mode" "$r$dst"
    done
    mount -t proc proc "$r/proc"
    mount -t tmpfs -o mode=755 tmpfs "$r/dev"
    for d in null zero random urandom; do touch "$r/dev/$d"; mount --bind "/dev/$d" "$r/dev/$d"; done
    exec setpriv '"$nnp"' "'"$(command -v chroot)"'" --userspec="'"$RUN_AS:$RUN_AS"'" "$r" "$@"' \
  container "$rootfs" "$ro" "${binds[*]}" "${ARGS[@]}" >"$work/node.log" 2>&1 </dev/null &
nspawn=$!
pids+=($nspawn)
node=
for _ in $(seq 200); do
  node=$(sed -n 's/.*listening on http:\/\/\([0-9.:]*\).*/\1/p' "$work/node.log" | head -1)
  [ -n "$node" ] && break
  kill -0 "$nspawn" 2>/dev/null || break
  sleep 0.05
done
if [ -n "$node" ]; then ok "the node container listens on $node in $(ms "$start") ms"; else
  bad "the node container starts"; tail -20 "$work/node.log"; summary; fi
# The container's process: unshare's child (bash, then setpriv, chroot and the
# node, each exec'd in turn).
node_pid=$(pgrep -P "$nspawn" | head -1)
check "it runs as uid 999, not root ($(ps -o uid=,user= -p "${node_pid:-1}" | xargs))" test "$(ps -o uid= -p "${node_pid:-1}" | tr -d ' ')" = 999
check "with no capability and no_new_privs ($(grep -E '^(CapEff|NoNewPrivs)' "/proc/${node_pid:-1}/status" | xargs))" bash -c "
  grep -q '^CapEff:[[:space:]]*0000000000000000$' /proc/${node_pid:-1}/status && grep -q '^NoNewPrivs:[[:space:]]*1$' /proc/${node_pid:-1}/status"
# A real S3 GET, signed with the cluster key, through the node in the container.
# (curl signs; S3 wants the payload's hash said too.)
get() { curl -sf --aws-sigv4 "aws:amz:us-east-1:s3" --user "shoal-cluster:$cluster_secret" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"; }
check "an S3 GET through the node container reads byte-exact (5,000,013 bytes)" \
  bash -c "$(declare -f get); cluster_secret=$cluster_secret; get http://$node/img/data/big.bin | cmp - '$seed/data/big.bin'"
check "a ranged GET too (bytes 4999000-5000012)" bash -c "$(declare -f get); cluster_secret=$cluster_secret;
  get -H 'Range: bytes=4999000-5000012' http://$node/img/data/big.bin | cmp - <(tail -c 1013 '$seed/data/big.bin')"
check "an unsigned GET is refused (403)" test "$(curl -s -o /dev/null -w '%{http_code}' "http://$node/img/data/small.bin")" = 403
check "the disk tier is written in the cache volume, by uid 999" bash -c "
  for _ in \$(seq 100); do [ -n \"\$(find '$work/cache' -type f -user 999 | head -1)\" ] && exit 0; sleep 0.05; done; exit 1"
# (unshare ignores SIGTERM while it waits: the container's process is told.)
kill "${node_pid:-$nspawn}" 2>/dev/null; wait "$nspawn" 2>/dev/null

echo "== the static shoal-mount in a root with no C library"
# The binary, its config, /etc/hosts, /dev/fuse, /dev/null (its daemon's
# standard input) and /proc (it reads its own mounts and program there):
# nothing else, no libc, no loader, no NSS module.
mkdir -p "$bare"/{etc,dev,proc,mnt,tmp}
cp "$rootfs/usr/bin/shoal-mount" "$bare/"
mknod -m 0666 "$bare/dev/fuse" c 10 229
mknod -m 0666 "$bare/dev/null" c 1 3
mount -t proc proc "$bare/proc"
# The origin by name: musl reads /etc/hosts itself.
echo "${origin%:*} origin.shoal.test" >"$bare/etc/hosts"
cat >"$bare/mount.toml" <<TOML
[origin]
endpoint = "http://origin.shoal.test:${origin##*:}"
region = "us-east-1"
[origin.credentials]
access_key_id = "image"
secret_access_key = "$origin_secret"
TOML
check "the root holds no libc, loader or NSS module ($(find "$bare" -xdev -type f | sed "s|$bare||" | xargs))" \
  bash -c "[ -z \"\$(find '$bare' -xdev \\( -name 'libc*' -o -name 'ld-*' -o -name 'libnss*' -o -name '*.so*' \\) -print)\" ]"
start=$(date +%s%N)
# (With no environment but its own, as a unit of the host's would start it.)
check "chroot ROOT /shoal-mount mounts img/data (the origin named through /etc/hosts)" \
  env -i "$(command -v chroot)" "$bare" /shoal-mount --config /mount.toml --log-file /tmp/mount.log img/data /mnt
echo "     mounted in $(ms "$start") ms"
check "the mount is FUSE's (fuse.shoal)" bash -c "findmnt -no FSTYPE '$bare/mnt' | grep -qx fuse.shoal"
check "files read byte-exact through it" bash -c "cmp '$bare/mnt/big.bin' '$seed/data/big.bin' && cmp '$bare/mnt/small.bin' '$seed/data/small.bin'"
check "umount ends it" umount "$bare/mnt"
summary
