#!/usr/bin/env bash
# The CSI plugin's container from the image (packaging/container/test.sh
# unpacks it into target/image/bundle/rootfs), run as the DaemonSet runs it, in
# a booted Debian system that has no shoal installed: the init container's
# command puts the image's static shoal-mount on the host, then the plugin's
# command runs as root in the image's root with the DaemonSet's mounts (the
# kubelet directory shared both ways, as Bidirectional propagation is: an rshared
# bind, so that what the plugin mounts there kubelet sees), its args and
# environment, each read from `kubectl kustomize packaging/kubernetes`. kubelet
# is played by packaging/system/csi-kubelet.py: a volume staged and published,
# read byte-exact, unpublished and unstaged. The origin and a cache node run on
# the host (the system shares its network).
# Usage: packaging/system/image.sh [SHOAL.deb, unused]. Prints "image-csi: N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/../.."
source packaging/system/lib.sh

passed=0; failed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }
check() { local what=$1; shift; if "$@" >"$work/check.log" 2>&1; then ok "$what"; else bad "$what"; sed 's/^/     /' "$work/check.log" | tail -20; return 1; fi; }
summary() { echo "image-csi: $passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }
ms() { echo $((($(date +%s%N) - $1) / 1000000)); }

rootfs=${SHOAL_IMAGE_ROOT:-$(pwd)/target/image/bundle/rootfs}
name=image
work=$(mktemp -d /tmp/shoal-system-image.XXXXXX)
pids=()
cleanup() {
  system_discard "$name"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
[ -x "$rootfs/usr/bin/shoal-csi" ] || { bad "the image's root at $rootfs (packaging/container/test.sh unpacks it)"; summary; }

echo "== tools"
python3 -c 'import grpc, grpc_tools' 2>/dev/null || python3 -m pip install --quiet grpcio grpcio-tools ||
  python3 -m pip install --quiet --break-system-packages grpcio grpcio-tools
export CSI_STUBS=$work/stubs
# The DaemonSet as the install renders it (a key of this run for the Secret).
cp -r packaging/kubernetes "$work/k8s"
printf 'image-test-key' >"$work/k8s/base/cluster-secret-key"
kubectl kustomize "$work/k8s" >"$work/install.yaml" 2>"$work/kustomize.log" ||
  { bad "kubectl kustomize packaging/kubernetes"; cat "$work/kustomize.log"; summary; }
for c in install-mount shoal-csi; do
  python3 packaging/system/image-pod.py DaemonSet shoal-csi-node "$c" <"$work/install.yaml" >"$work/$c.sh" ||
    { bad "the DaemonSet's container $c"; summary; }
done
# shellcheck disable=SC1090
source "$work/install-mount.sh"; init_args=("${ARGS[@]}"); init_mounts=("${MOUNTS[@]}"); init_user=$RUN_AS
# shellcheck disable=SC1090
source "$work/shoal-csi.sh"; plugin_args=("${ARGS[@]}"); plugin_mounts=("${MOUNTS[@]}")
ok "the DaemonSet's containers, from the rendering: install-mount runs ${init_args[*]}; shoal-csi (user ${RUN_AS:-of the image}, privileged $PRIVILEGED) runs ${plugin_args[*]}"

echo "== origin and a cache node on the host"
mkdir -p "$work/seed/vol"
head -c 3145741 /dev/urandom >"$work/seed/vol/big.bin"
head -c 70001 /dev/urandom >"$work/seed/vol/small.bin"
stamp=$(date +%s%N)
origin_secret=origin-secret-$stamp cluster_secret=cluster-secret-$stamp
SHOAL_ORIGIN_ACCESS_KEY=image-origin SHOAL_ORIGIN_SECRET_KEY=$origin_secret target/release/shoal-test-origin \
  --listen 127.0.40.1:0 --bucket csi --seed "$work/seed" --addr-file "$work/origin.addr" 2>"$work/origin.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/origin.addr" ] && break; sleep 0.1; done
origin=$(cat "$work/origin.addr" 2>/dev/null)
cat >"$work/node.toml" <<TOML
[origin]
endpoint = "http://$origin"
[origin.credentials]
access_key_id = "image-origin"
secret_access_key = "$origin_secret"
[node]
listen = "127.0.40.2:0"
[auth]
[[auth.keys]]
access_key_id = "shoal-cluster"
secret_access_key = "$cluster_secret"
TOML
RUST_LOG=info target/release/shoal-node --config "$work/node.toml" 2>"$work/node.log" &
pids+=($!)
node=
for _ in $(seq 100); do
  node=$(sed -n 's/.*listening on http:\/\/\([0-9.:]*\).*/\1/p' "$work/node.log" | head -1)
  [ -n "$node" ] && break
  sleep 0.1
done
if [ -n "$origin" ] && [ -n "$node" ]; then ok "origin on $origin, node on $node"; else
  bad "origin and node start"; tail "$work/origin.log" "$work/node.log"; summary; fi

echo "== a booted system without shoal, the image's root in it"
start=$(date +%s%N)
system_root || { bad "the system's root"; summary; }
system_discard "$name"
system_boot "$name" || { bad "system $name boots"; summary; }
ok "system $name booted in $(ms "$start") ms"
check "no shoal on the host" in_system bash -c '! command -v shoal-mount && ! command -v shoal-csi && [ ! -e /opt/csi ]'
# The image's root, as a runtime unpacks it (a copy: the plugin runs in it).
cp -a "$rootfs" "$(system_path /image)"
# What the ConfigMap and the Secret give the plugin.
mkdir -p "$(system_path /etc/shoal-csi)"
cat >"$(system_path /etc/shoal-csi/mount.toml)" <<TOML
[origin]
endpoint = "http://$origin"
region = "us-east-1"
[cluster]
nodes = ["$node"]
[cluster.credentials]
access_key_id = "shoal-cluster"
secret_access_key_env = "SHOAL_CLUSTER_SECRET"
TOML
(umask 077 && printf 'SHOAL_CLUSTER_SECRET=%s\nAWS_ACCESS_KEY_ID=image-origin\nAWS_SECRET_ACCESS_KEY=%s\nNODE_NAME=image-node\nRUST_LOG=info\n' \
  "$cluster_secret" "$origin_secret" >"$(system_path /etc/shoal-csi/plugin.env)")
in_system mkdir -p /var/lib/kubelet/pods /var/lib/kubelet/plugins_registry

# container NAME USER MOUNTS...: a script of the booted system's that runs a
# command as the pod's container NAME: chroot into the image's root (no mount
# namespace of its own, as a Bidirectional mount needs: what it mounts under
# /var/lib/kubelet is the host's), with each of the container's mounts: a
# hostPath bound at its path (rshared for Bidirectional), the ConfigMap from
# /etc/shoal-csi; /proc, /sys and /tmp as a runtime gives them.
container() {
  local cname=$1 user=$2 m path prop mode src
  shift 2
  {
    echo "#!/bin/bash"
    echo "set -e"
    echo "r=/image"
    echo "mountpoint -q \$r/proc || mount -t proc proc \$r/proc"
    echo "mkdir -p \$r/proc \$r/sys \$r/run; mountpoint -q \$r/sys || mount -t sysfs sysfs \$r/sys"
    for m in "$@"; do
      read -r path prop mode src <<<"$m"
      case $src in
        configMap) src=/etc/shoal-csi ;;
        /*) mkdir -p "$(system_path "$src")" ;;
        *) echo "echo 'volume kind $src not run here' >&2; exit 1"; continue ;;
      esac
      echo "mkdir -p \$r$path"
      echo "if ! mountpoint -q \$r$path; then"
      if [ "$prop" = Bidirectional ]; then
        echo "  mount --rbind $src \$r$path; mount --make-rshared \$r$path"
      else
        echo "  mount --rbind $src \$r$path; mount --make-rslave \$r$path"
      fi
      [ "$mode" = ro ] && echo "  mount -o remount,bind,ro \$r$path"
      echo "fi"
    done
    echo "exec chroot ${user:+--userspec=$user:$user} \$r \"\$@\""
  } >"$(system_path "/usr/local/bin/container-$cname")"
  chmod 0755 "$(system_path "/usr/local/bin/container-$cname")"
}
container install-mount "$init_user" "${init_mounts[@]}"
container shoal-csi "$RUN_AS" "${plugin_mounts[@]}"

echo "== the init container: the static shoal-mount onto the host"
check "install-mount runs ${init_args[*]}" in_system /usr/local/bin/container-install-mount "${init_args[@]}"
installed=$(echo "${plugin_args[*]}" | grep -o -- '--mount-bin=[^ ]*' | cut -d= -f2)
check "the host has $installed, statically linked, and it runs there" in_system bash -c "
  [ -x '$installed' ] && ! grep -q 'ld-linux' '$installed' && '$installed' --version"

echo "== the plugin's container, with the DaemonSet's arguments"
plugin_dir=/var/lib/kubelet/plugins/csi.shoal
socket=$(echo "${plugin_args[*]}" | grep -o -- '--endpoint=unix://[^ ]*' | sed 's|--endpoint=unix://||')
# $(NODE_NAME) is kubelet's to expand from the container's environment.
exec_args=()
for a in "${plugin_args[@]}"; do exec_args+=("${a//\$(NODE_NAME)/image-node}"); done
cat >"$(system_path /etc/systemd/system/shoal-csi-container.service)" <<UNIT
[Unit]
Description=shoal CSI plugin, the image's container as the DaemonSet runs it
[Service]
EnvironmentFile=/etc/shoal-csi/plugin.env
ExecStart=/usr/local/bin/container-shoal-csi ${exec_args[*]}
UNIT
in_system systemctl daemon-reload
start=$(date +%s%N)
in_system systemctl start shoal-csi-container
kubelet() { python3 packaging/system/csi-kubelet.py "$(system_path "$socket")" "$@"; }
probe=
for _ in $(seq 100); do probe=$(kubelet probe 2>&1) && break; probe=; sleep 0.1; done
if [[ $probe == *csi.shoal* ]]; then ok "the plugin's container serves CSI on $socket in $(ms "$start") ms: $probe"; else
  bad "the plugin's container serves CSI"; in_system journalctl --no-pager -n 30 -u shoal-csi-container; summary; fi

echo "== stage and publish: a unit of the host's systemd running the installed shoal-mount"
staging=/var/lib/kubelet/plugins/kubernetes.io/csi/csi.shoal/vol-image/globalmount
target=/var/lib/kubelet/pods/pod-i/volumes/kubernetes.io~csi/vol-image/mount
in_system mkdir -p "$staging" "$(dirname "$target")"
check "NodeStageVolume" kubelet stage vol-image "$staging" --attr bucket=csi --attr prefix=vol
check "NodePublishVolume" kubelet publish vol-image "$target" --staging "$staging" --attr bucket=csi --attr prefix=vol \
  --attr csi.storage.k8s.io/pod.name=pod-i --attr csi.storage.k8s.io/pod.namespace=default
units() { in_system systemctl list-units --all --plain --no-legend --no-pager 'shoal-csi-*' | awk '$1 != "shoal-csi-container.service"'; }
unit=$(units | awk '{print $1}' | head -1)
check "one unit ($unit) runs $installed" bash -c "
  [ \$(nsenter -t $SYSTEM_LEADER -a systemctl list-units --all --plain --no-legend 'shoal-csi-*' | grep -vc shoal-csi-container) = 1 ] &&
  nsenter -t $SYSTEM_LEADER -a systemctl show -p ExecStart --value '$unit' | grep -q 'path=$installed'"
check "the host sees the publish target as a FUSE mount" in_system bash -c "findmnt -no FSTYPE '$target' | grep -qx fuse.shoal"
mkdir -p "$(system_path /root/expect)"
cp "$work/seed/vol/"* "$(system_path /root/expect)/"
check "reads through the published volume are byte-exact" in_system bash -c "
  cmp '$target/big.bin' /root/expect/big.bin && cmp '$target/small.bin' /root/expect/small.bin"
check "NodeUnpublishVolume" kubelet unpublish vol-image "$target"
check "NodeUnstageVolume" kubelet unstage vol-image "$staging"
for _ in $(seq 100); do [ -z "$(units)" ] && break; sleep 0.1; done
check "the mount's unit is gone and the target unmounted" bash -c "[ -z \"\$(nsenter -t $SYSTEM_LEADER -a systemctl list-units --all --plain --no-legend 'shoal-csi-*' | grep -v shoal-csi-container)\" ] &&
  ! nsenter -t $SYSTEM_LEADER -a mountpoint -q '$target'"
summary
