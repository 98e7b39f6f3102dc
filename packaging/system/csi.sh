#!/usr/bin/env bash
# The CSI driver as its DaemonSet runs it (packaging/kubernetes/csi/daemonset.yaml),
# in a booted Debian system (packaging/system/lib.sh) with the package installed:
# the plugin itself a unit (shoal-csi-plugin.service, restarted when killed, as
# kubelet restarts the container, its secrets from an environment file as the
# container's come from a Secret), `--launcher systemd` so that every volume's
# mount is a transient unit of that system's systemd, and kubelet played by a CSI
# client (packaging/system/csi-kubelet.py) over the plugin's socket. The origin and
# cache nodes run on the host (loopback is shared), on 127.0.38.x, and so does a
# stand-in for the Kubernetes API (packaging/system/kube-api.py) the plugin reads
# its node's zone from and its mounts the nodes' EndpointSlices.
# Usage: packaging/system/csi.sh SHOAL.deb. Prints "csi: N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
deb=$(realpath "${1:?usage: packaging/system/csi.sh SHOAL.deb}")
source packaging/system/lib.sh

passed=0; failed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }
check() { local what=$1; shift; if "$@" >"$work/check.log" 2>&1; then ok "$what"; else bad "$what"; sed 's/^/     /' "$work/check.log" | tail -20; return 1; fi; }
summary() { echo "csi: $passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }

name=csi
work=$(mktemp -d /tmp/shoal-system-csi.XXXXXX)
pids=()
cleanup() {
  [ -n "${SYSTEM_LEADER:-}" ] && touch "$(system_path /run/reader.stop)" 2>/dev/null
  system_discard "$name"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

ms() { echo $((($(date +%s%N) - $1) / 1000000)); }

# The plugin as the DaemonSet starts it, its paths the host paths it names.
plugin_dir=/var/lib/kubelet/plugins/csi.shoal
socket_in=$plugin_dir/csi.sock
pods=/var/lib/kubelet/pods
# Secrets of this run alone: whatever shows them was given them by this run.
stamp=$(date +%s%N)
origin_key=csi-origin-key
origin_secret=origin-secret-$stamp
cluster_key=csi-cluster
cluster_secret=cluster-secret-$stamp
pod_token=pod-token-$stamp
kube_token=kube-token-$stamp
node_name=system-csi-node
zone=zone-a
# Where the plugin serves its metrics and its mounts' (--metrics-addr).
csi_metrics=127.0.38.8:9809

echo "== tools"
python3 -c 'import grpc, grpc_tools' 2>/dev/null || python3 -m pip install --quiet grpcio grpcio-tools ||
  python3 -m pip install --quiet --break-system-packages grpcio grpcio-tools
export CSI_STUBS=$work/stubs
kubelet() { python3 packaging/system/csi-kubelet.py "$(system_path "$socket_in")" "$@"; }
check "CSI client stubs compiled from csi/proto" python3 -c "
import sys; sys.argv = ['x']; sys.path.insert(0, 'packaging/system')
import importlib.util as u
s = u.spec_from_file_location('k', 'packaging/system/csi-kubelet.py'); m = u.module_from_spec(s); s.loader.exec_module(m)
m.stubs()"

echo "== origin and a cache node on the host"
mkdir -p "$work/seed/alpha" "$work/seed/beta"
head -c 3145728 /dev/urandom >"$work/seed/alpha/big.bin"
for i in 1 2 3; do head -c $((i * 70000 + 13)) /dev/urandom >"$work/seed/alpha/small-$i.bin"; done
head -c 1048577 /dev/urandom >"$work/seed/beta/other.bin"
# A file 16 pods read through one staged volume.
shared_mib=256
mkdir -p "$work/seed/shared"
head -c $((shared_mib << 20)) /dev/urandom >"$work/seed/shared/big.bin"
shared_md5=$(md5sum <"$work/seed/shared/big.bin" | cut -d' ' -f1)
# Files read through a volume whose nodes come from EndpointSlices: each one
# block, read once, so that each read asks a node.
mkdir -p "$work/seed/slices"
for i in $(seq 0 139); do head -c $((200000 + i)) /dev/urandom >"$work/seed/slices/$(printf f-%03d "$i")"; done
SHOAL_ORIGIN_ACCESS_KEY=$origin_key SHOAL_ORIGIN_SECRET_KEY=$origin_secret \
  target/release/shoal-test-origin --listen 127.0.38.1:0 --bucket csi --seed "$work/seed" \
  --addr-file "$work/origin.addr" 2>"$work/origin.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/origin.addr" ] && break; sleep 0.1; done
origin=$(cat "$work/origin.addr" 2>/dev/null)
cat >"$work/node.toml" <<TOML
[origin]
endpoint = "http://$origin"
[origin.credentials]
access_key_id = "$origin_key"
secret_access_key = "$origin_secret"
[node]
listen = "127.0.38.2:0"
[auth]
[[auth.keys]]
access_key_id = "$cluster_key"
secret_access_key = "$cluster_secret"
allow = ["*:*"]
TOML
RUST_LOG=info target/release/shoal-node --config "$work/node.toml" 2>"$work/node.log" &
pids+=($!)
# The API server as far as the plugin and its mounts read it (its own node,
# with the zone label; the node Service's EndpointSlices, listed and watched),
# for its service account's token alone.
python3 packaging/system/kube-api.py --listen 127.0.38.3 --addr-file "$work/kube.addr" \
  --token "$kube_token" --node "$node_name" --zone "$zone" 2>"$work/kube.log" &
pids+=($!)
node=
for _ in $(seq 100); do
  node=$(sed -n 's/.*listening on http:\/\/\([0-9.:]*\).*/\1/p' "$work/node.log" | head -1)
  [ -n "$node" ] && break
  sleep 0.1
done
for _ in $(seq 100); do [ -s "$work/kube.addr" ] && break; sleep 0.1; done
kube=$(cat "$work/kube.addr" 2>/dev/null)
if [ -n "$origin" ] && [ -n "$node" ] && [ -n "$kube" ]; then ok "origin on $origin, node on $node ($zone), Kubernetes API on $kube"; else
  bad "origin, node and Kubernetes API start"; tail "$work/origin.log" "$work/node.log" "$work/kube.log"; summary; fi

echo "== a booted system with the package"
start=$(date +%s%N)
system_root || { bad "the system's root"; summary; }
system_discard "$name"
system_boot "$name" || { bad "system $name boots"; summary; }
ok "system $name booted: $(in_system systemctl is-system-running) in $(ms "$start") ms"
cp "$deb" "$(system_path /root/shoal.deb)"
check "dpkg -i installs the package" in_system dpkg -i /root/shoal.deb

# What the DaemonSet's pod gives the plugin: shoal-mount at a host path (its init
# container), the mount config (its ConfigMap), the secrets as environment
# variables (secretKeyRef), and kubelet's directories.
mkdir -p "$(system_path "$pods")" "$(system_path /root/expect)"
cp -r "$work/seed/alpha" "$work/seed/beta" "$work/seed/slices" "$(system_path /root/expect)/"
in_system install -D -m 0755 /usr/bin/shoal-mount "$plugin_dir/bin/shoal-mount"
cat >"$(system_path /etc/shoal/mount.toml)" <<TOML
# Origin keys from the credential chain (the driver's environment); the cluster
# key's secret from the variable the DaemonSet fills from its Secret.
[origin]
endpoint = "http://$origin"
region = "us-east-1"
retry_base = "5ms"
retry_max = "50ms"
[cluster]
nodes = [{ id = "$node", zone = "$zone" }]
connect_timeout = "300ms"
first_byte_timeout = "1s"
stall_timeout = "1s"
[cluster.credentials]
access_key_id = "$cluster_key"
secret_access_key_env = "SHOAL_CLUSTER_SECRET"
TOML
(umask 077 && cat >"$(system_path /etc/shoal/csi-plugin.env)" <<ENV
SHOAL_CLUSTER_SECRET=$cluster_secret
AWS_ACCESS_KEY_ID=$origin_key
AWS_SECRET_ACCESS_KEY=$origin_secret
ENV
)
# The service account's token, as kubelet projects it into the pod.
# (Written from inside: /var/run is a link to /run, which a path through
# /proc/PID/root would resolve on the host.)
in_system install -d -m 0755 /var/run/secrets/kubernetes.io/serviceaccount
printf '%s' "$kube_token" | in_system install -m 0600 /dev/stdin /var/run/secrets/kubernetes.io/serviceaccount/token
cat >"$(system_path /etc/systemd/system/shoal-csi-plugin.service)" <<UNIT
[Unit]
Description=shoal CSI node plugin, as the DaemonSet's container runs it

[Service]
# The DaemonSet's arguments; in a pod the API's address comes from
# KUBERNETES_SERVICE_HOST, here it is given.
ExecStart=/usr/bin/shoal-csi --endpoint=unix://$socket_in --node-id=$node_name --zone-from-node --state-dir=$plugin_dir --launcher=systemd --mount-bin=$plugin_dir/bin/shoal-mount --default-config=/etc/shoal/mount.toml --kube-api=http://$kube --metrics-addr=$csi_metrics
EnvironmentFile=/etc/shoal/csi-plugin.env
Environment=RUST_LOG=info
# kubelet starts a killed container again.
Restart=always
RestartSec=1
UNIT
in_system systemctl daemon-reload
start=$(date +%s%N)
in_system systemctl start shoal-csi-plugin
probe=
for _ in $(seq 100); do probe=$(kubelet probe 2>&1) && break; probe=; sleep 0.1; done
if [[ $probe == *csi.shoal* ]]; then ok "plugin unit serves CSI on $socket_in in $(ms "$start") ms: $probe"; else
  bad "plugin unit serves CSI"; in_system journalctl --no-pager -n 30 -u shoal-csi-plugin; summary; fi

info=$(kubelet info 2>&1)
in_system journalctl --no-pager -o cat -u shoal-csi-plugin | grep -m1 'zone' | sed 's/^/     plugin: /'
check "NodeGetInfo reports the zone read from the node's label: $info" grep -q "\"topology.kubernetes.io/zone\": \"$zone\"" <<<"$info"

echo "== NodePublishVolume: a transient unit per volume"
# What kubelet sends: the PV's attributes with its pod info, and the pod's token
# among the secrets (the CSIDriver's tokenRequests).
tokens="{\"sts.amazonaws.com\":{\"token\":\"$pod_token\",\"expirationTimestamp\":\"2030-01-01T00:00:00Z\"}}"
target_a=$pods/pod-a/volumes/kubernetes.io~csi/pv-alpha/mount
target_b=$pods/pod-b/volumes/kubernetes.io~csi/pv-beta/mount
publish() { # VOLUME TARGET PREFIX POD
  in_system mkdir -p "$(dirname "$2")"
  kubelet publish "$1" "$2" --attr bucket=csi --attr "prefix=$3" \
    --attr "csi.storage.k8s.io/pod.name=$4" --attr csi.storage.k8s.io/pod.namespace=default \
    --attr "csi.storage.k8s.io/pod.uid=$4" --attr csi.storage.k8s.io/serviceAccount.name=default \
    --secret "csi.storage.k8s.io/serviceAccount.tokens=$tokens"
}
units() { in_system systemctl list-units --all --plain --no-legend --no-pager 'shoal-csi-*' | awk '$1 != "shoal-csi-plugin.service"'; }
not_listed() { ! units | grep -q "^$1 "; }
start=$(date +%s%N)
check "publish vol-alpha at pod-a's target" publish vol-alpha "$target_a" alpha pod-a
echo "     publish took $(ms "$start") ms"
check "publish vol-beta at pod-b's target" publish vol-beta "$target_b" beta pod-b
units | sed 's/^/     list-units: /'
# Each volume's unit, found by its mount's target (its command line's last word).
unit_of() { units | awk -v t="$1" '$NF == t {print $1}'; }
unit_a=$(unit_of "$target_a")
unit_b=$(unit_of "$target_b")
check "one transient unit per volume ($(units | wc -l) units: ${unit_a:-none} for pod-a's, ${unit_b:-none} for pod-b's)" \
  test "$(units | wc -l)" = 2 -a "$(echo "$unit_a" | grep -c .)" = 1 -a "$(echo "$unit_b" | grep -c .)" = 1
check "each unit's name says its volume" bash -c "[[ '$unit_a' == *vol-alpha* && '$unit_b' == *vol-beta* ]]"
[ -n "$unit_a" ] && [ -n "$unit_b" ] || summary
for u in $unit_a $unit_b; do
  check "$u is active, a transient unit running shoal-mount from $plugin_dir/bin in $zone" bash -c "
    s=\$(nsenter -t $SYSTEM_LEADER -a systemctl show -p ActiveState,Transient,ExecStart '$u')
    echo \"\$s\"; grep -qx ActiveState=active <<<\"\$s\" && grep -qx Transient=yes <<<\"\$s\" &&
    grep -q 'path=$plugin_dir/bin/shoal-mount' <<<\"\$s\" && grep -q -- '--zone=$zone' <<<\"\$s\""
done
check "both targets are FUSE mounts" in_system bash -c "findmnt -no FSTYPE '$target_a' | grep -qx fuse.shoal && findmnt -no FSTYPE '$target_b' | grep -qx fuse.shoal"
check "reads byte-exact through both" in_system bash -c "
  for f in big.bin small-1.bin small-2.bin small-3.bin; do cmp '$target_a'/\$f /root/expect/alpha/\$f || exit 1; done
  cmp '$target_b'/other.bin /root/expect/beta/other.bin"
check "the volumes' journals show their mounts (journalctl -u)" bash -c "
  nsenter -t $SYSTEM_LEADER -a journalctl --no-pager -o cat -u '$unit_a' | grep -q 'mounted s3://csi/alpha/ on $target_a' &&
  nsenter -t $SYSTEM_LEADER -a journalctl --no-pager -o cat -u '$unit_b' | grep -q 'mounted s3://csi/beta/ on $target_b'"
admitted=$(curl -s "http://$node/metrics" | sed -n "s/^shoal_node_key_requests_total{key=\"$cluster_key\"} \([0-9.e+]*\)$/\1/p")
check "the node admitted the mounts' reads, signed with the cluster secret from the plugin's environment ($admitted requests)" \
  test "${admitted:-0}" != 0

echo "== the plugin's unit SIGKILLed and started again, then restarted, under a reader"
# The reader: cmp of every file of vol-alpha, over and over, each call timed.
in_system bash -c "
  rm -f /run/reader.stop; calls=0; failed=0; slowest=0
  while [ ! -e /run/reader.stop ]; do
    for f in big.bin small-1.bin small-2.bin small-3.bin; do
      t=\$(date +%s%N)
      cmp -s '$target_a'/\$f /root/expect/alpha/\$f || failed=\$((failed + 1))
      t=\$(((\$(date +%s%N) - t) / 1000000)); [ \$t -gt \$slowest ] && slowest=\$t
      calls=\$((calls + 1))
    done
    echo \"\$calls \$failed \$slowest\" >/run/reader.out
  done" &
reader=$!
pids+=($reader)
# reader_read N: returns once the reader has gone N more times through the files
# (within 30 s), so that a kill and a restart each have reads before and after.
reader_read() {
  local want
  want=$(($(reader_calls) + 4 * $1))
  for _ in $(seq 600); do
    [ "$(reader_calls)" -ge "$want" ] && return 0
    sleep 0.05
  done
  echo "     the reader made no progress" >&2
}
# (The reader rewrites its file after each pass: empty for a moment.)
reader_calls() {
  local c
  c=$(cut -d' ' -f1 "$(system_path /run/reader.out)" 2>/dev/null)
  echo "${c:-0}"
}
reader_read 2
mounts_before=$(in_system systemctl show -p MainPID --value $unit_a $unit_b | tr '\n' ' ')
plugin() { in_system systemctl show -p "$1" --value shoal-csi-plugin; }
pid_before=$(plugin MainPID)
invocation_before=$(plugin InvocationID)
# wait_back INVOCATION: until the plugin runs as another invocation and answers.
wait_back() {
  local i
  for i in $(seq 200); do
    invocation=$(plugin InvocationID)
    [ "$invocation" != "$1" ] && kubelet probe >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  in_system journalctl --no-pager -n 20 -u shoal-csi-plugin
  return 1
}
start=$(date +%s%N)
check "systemctl kill -s KILL shoal-csi-plugin" in_system systemctl kill -s KILL shoal-csi-plugin
if wait_back "$invocation_before"; then ok "the plugin was started again and answers in $(ms "$start") ms (MainPID $pid_before -> $(plugin MainPID))"; else
  bad "the plugin was started again"; fi
killed_invocation=$invocation
reader_read 2
# What a rollout does first: SIGTERM, then SIGKILL after the grace period.
start=$(date +%s%N)
check "systemctl restart shoal-csi-plugin (SIGTERM first, as a rollout stops a container)" in_system systemctl restart shoal-csi-plugin
if wait_back "$killed_invocation"; then ok "the plugin answers again in $(ms "$start") ms"; else bad "the plugin answers again"; fi
# (journald may take a moment with the last line of a process that has exited.)
check "the stopped plugin said its volumes stay mounted" bash -c \
  "for i in \$(seq 50); do nsenter -t $SYSTEM_LEADER -a journalctl --no-pager -o cat -u shoal-csi-plugin | grep 'published volumes stay mounted' && exit; sleep 0.1; done; exit 1"
reader_read 2
touch "$(system_path /run/reader.stop)"
wait "$reader"
read -r calls rfailed slowest <"$(system_path /run/reader.out)"
check "a reader across the kill and the restart: $calls calls, $rfailed failed, slowest $slowest ms" test "$calls" -gt 20 -a "$rfailed" = 0
mounts_after=$(in_system systemctl show -p MainPID --value $unit_a $unit_b | tr '\n' ' ')
check "the volumes' units were not touched (MainPIDs $mounts_before-> $mounts_after)" test "$mounts_before" = "$mounts_after" -a -n "${mounts_before// /}"
for inv in "killed:$killed_invocation" "restarted:$invocation"; do
  in_system journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID="${inv#*:}" >"$work/plugin.log"
  grep 'took back' "$work/plugin.log" | sed "s/^/     plugin started after it was ${inv%%:*}: /"
  check "the plugin started after it was ${inv%%:*} took back both volumes" bash -c \
    "grep -q 'took back $target_a' '$work/plugin.log' && grep -q 'took back $target_b' '$work/plugin.log'"
done
for v in vol-alpha:"$target_a" vol-beta:"$target_b"; do
  stats=$(kubelet stats "${v%%:*}" "${v#*:}" 2>&1)
  echo "     NodeGetVolumeStats ${v%%:*}: $stats"
  # (From a file: the condition's text has quotes of its own.)
  printf '%s\n' "$stats" >"$work/stats"
  check "NodeGetVolumeStats answers for ${v%%:*} after the restart: normal" bash -c \
    "! grep -q '\"abnormal\"' '$work/stats' && grep -q 'mounted, answering, and served' '$work/stats' && grep -q '\"unit\": \"BYTES\"' '$work/stats'"
done
again=$(publish vol-alpha "$target_a" alpha pod-a 2>&1)
check "a publish of vol-alpha again (kubelet's after a restart) is OK ($again) and starts no unit ($(units | wc -l) units)" \
  test "$again" = "{}" -a "$(units | wc -l)" = 2

echo "== no secret in any unit's properties"
in_system bash -c 'systemctl show --no-pager -- $(systemctl list-units --all --plain --no-legend --no-pager | awk "{print \$1}")' >"$work/show.txt"
in_system ps -eo args >"$work/ps.txt"
in_system journalctl --no-pager -o cat >"$work/journal.txt"
for what in "systemctl show of every unit ($(grep -c '^Id=' "$work/show.txt") units):show.txt" \
  "ps command lines ($(wc -l <"$work/ps.txt") processes):ps.txt" "the journal:journal.txt"; do
  check "no secret in ${what%:*}" bash -c "! grep -n -e '$origin_secret' -e '$cluster_secret' -e '$pod_token' -e '$kube_token' '$work/${what##*:}'"
done
check "the units run shoal-mount --env-file on a 0600 file of root's" bash -c "
  for u in $unit_a $unit_b; do
    f=\$(nsenter -t $SYSTEM_LEADER -a systemctl show -p ExecStart --value \$u | grep -o -- '--env-file [^ ;]*' | cut -d' ' -f2)
    [ -n \"\$f\" ] && [ \"\$(nsenter -t $SYSTEM_LEADER -a stat -c '%a %U' \"\$f\")\" = '600 root' ] || { echo \"\$u: \$f\"; exit 1; }
  done"

echo "== NodeUnpublishVolume: the unit stops, the mount goes"
# unpublish VOLUME TARGET UNIT: the call, then how the unit is when it returns
# and how long it takes to be gone from list-units.
unpublish() {
  local start state i
  start=$(date +%s%N)
  check "unpublish $1" kubelet unpublish "$1" "$2"
  state=$(in_system systemctl show -p ActiveState,SubState --value "$3" | tr '\n' ' ')
  for i in $(seq 100); do
    not_listed "$3" && break
    sleep 0.1
  done
  check "$3 is gone from list-units $(ms "$start") ms after the call began (when it returned: $state)" not_listed "$3" ||
    in_system bash -c "systemctl status --no-pager -n 20 '$3'; journalctl --no-pager -o cat -n 10 -u shoal-csi-plugin" 2>&1 | sed 's/^/     /'
  check "$2 is unmounted and removed" in_system bash -c "! mountpoint -q '$2' && [ ! -e '$2' ]"
}
unpublish vol-alpha "$target_a" "$unit_a"
check "vol-beta still reads byte-exact" in_system cmp "$target_b/other.bin" /root/expect/beta/other.bin
# kubelet publishing at a target it has just unpublished (a mount retried, a
# pod's volume remounted): a unit of the same name again.
kubelet unpublish vol-beta "$target_b" >/dev/null &&
  check "publish vol-beta again at once after its unpublish: a unit of the same name starts" publish vol-beta "$target_b" beta pod-b &&
  check "and reads byte-exact" in_system cmp "$target_b/other.bin" /root/expect/beta/other.bin
unpublish vol-beta "$target_b" "$unit_b"
check "no shoal-csi transient unit left" test -z "$(units)"

echo "== NodeStageVolume: 16 pods of one volume share one mount"
# kubelet stages a volume once on its node, then publishes it for each pod.
staging=/var/lib/kubelet/plugins/kubernetes.io/csi/csi.shoal/pv-shared/globalmount
in_system mkdir -p "$staging"
cached() { in_system awk '$1 == "Cached:" {print int($2 / 1024)}' /proc/meminfo; }
node_origin_mib() { curl -s "http://$node/metrics" | awk '$1 == "shoal_node_origin_bytes_total" {print int($2 / 1048576)}'; }
check "stage vol-shared (a 256 MiB memory limit)" kubelet stage vol-shared "$staging" --attr bucket=csi --attr prefix=shared --attr memoryLimit=256MiB
shared_targets=()
for i in $(seq 16); do
  t=$pods/pod-s$i/volumes/kubernetes.io~csi/pv-shared/mount
  in_system mkdir -p "$(dirname "$t")"
  kubelet publish vol-shared "$t" --staging "$staging" --attr bucket=csi --attr prefix=shared --attr memoryLimit=256MiB >"$work/check.log" 2>&1 ||
    { bad "publish vol-shared for pod-s$i"; cat "$work/check.log"; }
  shared_targets+=("$t")
done
units | sed 's/^/     list-units: /'
check "16 publishes and a stage: 1 unit ($(units | wc -l))" test "$(units | wc -l)" = 1
shared_unit=$(units | awk '{print $1}')
check "$shared_unit has MemoryMax=256M" bash -c "[ \"\$(nsenter -t $SYSTEM_LEADER -a systemctl show -p MemoryMax --value '$shared_unit')\" = 268435456 ]"
origin_before=$(node_origin_mib); cached_before=$(cached)
check "pod-s1 reads the 256 MiB file byte-exact" test "$(in_system md5sum "${shared_targets[0]}/big.bin" | cut -d' ' -f1)" = "$shared_md5"
cached_first=$(cached)
all_read=0
for t in "${shared_targets[@]:1}"; do
  [ "$(in_system md5sum "$t/big.bin" | cut -d' ' -f1)" = "$shared_md5" ] && all_read=$((all_read + 1))
done
cached_all=$(cached); origin_after=$(node_origin_mib)
echo "     page cache: +$((cached_first - cached_before)) MiB for the first read (the file, once), +$((cached_all - cached_first)) MiB for the other 15"
check "the other 15 pods read it byte-exact ($all_read of 15)" test "$all_read" = 15
# Both bounds: under the file is a mount that read the origin itself (or a
# node's counter gone), over it a block fetched twice.
check "the node fetched $((origin_after - origin_before)) MiB from the origin for 16 reads of $shared_mib MiB (1.0x)" \
  test "$((origin_after - origin_before))" -ge "$shared_mib" -a "$((origin_after - origin_before))" -le $((shared_mib + 1))
# (The host's whole page cache: other work on the host moves it by tens of MiB.)
# The first read did fill it (a mount reading around the page cache, with
# direct I/O, would pass the bound after it for no reason)...
check "the first read grew the page cache by about the file ($((cached_first - cached_before)) MiB of $shared_mib)" \
  test $((cached_first - cached_before)) -ge $((shared_mib / 2))
# ... and the other 15 shared it.
check "the other 15 reads grew the page cache by under 1x the file ($((cached_all - cached_first)) MiB), not 15x" \
  test $((cached_all - cached_first)) -lt "$shared_mib"
# The unit's memory as its cgroup counted it: v2's memory.peak and
# memory.events, else v1's max_usage_in_bytes, failcnt and oom_control (a v1
# host's system gets a memory hierarchy its units can use: lib.sh). The kernel
# enforces MemoryMax= whatever the mount does, so a peak under it proves
# nothing: what is checked is that the unit never met it (each time it did,
# the kernel had to reclaim or kill), was never OOM-killed, and that the
# counter is the unit's own: it peaked at least at what its processes hold of
# their own memory now (system_unit_memory, lib.sh). Under CI a unit whose
# memory cannot be read fails.
if read -r version peak met kills anon < <(system_unit_memory "$shared_unit") && [[ "$peak $met $kills $anon" =~ ^[0-9]+\ [0-9]+\ [0-9]+\ [0-9]+$ ]]; then
  echo "     $shared_unit ($version): peak $((peak >> 20)) MiB, limit met $met times, $kills OOM kills, $((anon >> 20)) MiB its processes' own now"
  check "$shared_unit was never OOM-killed ($kills)" test "$kills" = 0
  check "$shared_unit never met its MemoryMax of 256 MiB (met $met times, peak $((peak >> 20)) MiB)" \
    test "$met" = 0 -a "$peak" -lt $((256 << 20))
  check "its peak counts its own processes: $((peak >> 20)) MiB, at least the $((anon >> 20)) MiB they hold now" \
    test "$anon" -gt 0 -a "$peak" -ge "$anon"
elif [ "${CI:-}" = true ]; then
  bad "$shared_unit: no memory accounting (cgroup v1 or v2) to read its peak, limit and OOM kills from"
else
  echo "     $shared_unit: no memory accounting (cgroup v1 or v2) in this system's cgroups: its memory is not checked"
fi
# 15 unpublishes while a reader goes on in the 16th.
last=${shared_targets[15]}
in_system bash -c "
  rm -f /run/shared.stop; n=0; failed=0
  while [ ! -e /run/shared.stop ]; do
    s=\$(md5sum <'$last/big.bin' | cut -d' ' -f1)
    [ \"\$s\" = $shared_md5 ] || failed=\$((failed + 1)); n=\$((n + 1))
    echo \"\$n \$failed\" >/run/shared.out
  done" &
shared_reader=$!
pids+=($shared_reader)
gone=0
for t in "${shared_targets[@]:0:15}"; do
  kubelet unpublish vol-shared "$t" >/dev/null && in_system bash -c "! mountpoint -q '$t' && [ ! -e '$t' ]" && gone=$((gone + 1))
done
check "15 unpublishes, each target unmounted and removed ($gone)" test "$gone" = 15
out0=$(in_system cat /run/shared.out 2>/dev/null)
for _ in $(seq 300); do
  out=$(in_system cat /run/shared.out 2>/dev/null)
  [ "${out%% *}" -ge $((${out0%% *} + 2)) ] 2>/dev/null && break
  sleep 0.1
done
in_system touch /run/shared.stop
wait "$shared_reader" 2>/dev/null
out=$(in_system cat /run/shared.out 2>/dev/null)
check "the reader in the 16th read on: ${out%% *} whole reads, ${out##* } failed" test "${out##* }" = 0 -a "${out%% *}" -gt "${out0%% *}"
check "its unit is still the one" test "$(units | awk '{print $1}')" = "$shared_unit"
check "unstage vol-shared" kubelet unstage vol-shared "$staging"
check "the last publish holds the mount" test -n "$(units)"
check "unpublish the 16th" kubelet unpublish vol-shared "$last"
for _ in $(seq 100); do [ -z "$(units)" ] && break; sleep 0.1; done
check "with the stage and the last publish gone, so is the unit" test -z "$(units)"

# Nodes from EndpointSlices; the driver's own role; mounts that follow its
# version and a mount that cannot start: each part in a file of its own.
for part in slices driver-role upgrade; do source "packaging/system/csi-$part.sh"; done
summary
