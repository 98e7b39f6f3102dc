#!/usr/bin/env bash
# The package's systemd units in a booted system, checked as an operator would with
# systemctl: shoal-node is ready when `systemctl start` returns, is restarted after a
# SIGKILL, hands over to a new process on `systemctl reload` under readers (no read
# failed, no connection refused, MainPID changed, nothing fetched again) and stops
# cleanly; shoal-mount@NAME mounts, reads byte-exact, hands over
# on `systemctl reload` and survives a killed server under readers without a failed
# read, and unmounts on stop; journalctl shows both; the book's fstab line (docs/src/mount.md) mounts
# at boot, after the node. The origin runs on the host (the system shares its
# network). Run as root: packaging/system/units.sh SHOAL.deb. Prints
# "units: N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
root=$(pwd)
deb=${1:?usage: packaging/system/units.sh SHOAL.deb}
[ -f "$deb" ] || { echo "units.sh: no package at $deb" >&2; exit 2; }
deb=$(realpath "$deb")
source packaging/system/lib.sh
source packaging/system/units-readers.sh

passed=0; failed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }
work=$(mktemp -d /tmp/shoal-units.XXXXXX)
check() { local what=$1; shift; if "$@" >"$work/check.log" 2>&1; then ok "$what"; else bad "$what"; sed 's/^/     /' "$work/check.log" | tail -20; fi; }
ms() { echo $((($(date +%s%N) - $1) / 1000000)); }

name=units-$$
origin_pid=
readers=()
readers_stalled=0
# shellcheck disable=SC2317 # run by the trap
cleanup() {
  for p in "${readers[@]}"; do kill "$p" 2>/dev/null; done
  system_discard "$name"
  [ -n "$origin_pid" ] && kill "$origin_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# Loopback addresses of their own, and a free port, so that other tests (another
# run of this one too) may listen on this machine at the same time.
node_addr=127.0.37.2:$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.37.2", 0)); print(s.getsockname()[1])')
node=shoal-node.service
mount=shoal-mount@data.service

finish() {
  echo "units: $passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit
}

echo "== the origin, on the host"
# Files of one, several and a part of a block (the mount reads 1 MiB blocks).
mkdir -p "$work/seed/sub"
head -c 3500000 /dev/urandom >"$work/seed/big.bin"
head -c 70000 /dev/urandom >"$work/seed/sub/small.bin"
cp config/node.toml "$work/seed/node.toml"
files=(big.bin sub/small.bin node.toml)
SHOAL_ORIGIN_SECRET_KEY=units-secret-0123456789 "$root/target/release/shoal-test-origin" --listen 127.0.37.1:0 \
  --access-key units --bucket units --seed "$work/seed" --addr-file "$work/origin.addr" >"$work/origin.log" 2>&1 &
origin_pid=$!
for _ in $(seq 100); do [ -s "$work/origin.addr" ] && break; sleep 0.1; done
if [ -s "$work/origin.addr" ]; then ok "test origin on $(cat "$work/origin.addr")"; else bad "test origin started"; finish; fi

echo "== a booted system with the package"
system_root || { bad "the system's root is built"; finish; }
t0=$(date +%s%N)
if system_boot "$name" && [ "$(in_system systemctl is-system-running)" = running ]; then
  ok "booted with systemd as PID 1 in $(ms "$t0") ms (state running)"
else
  bad "booted with systemd as PID 1"
  finish
fi
cp "$deb" "$(system_path /tmp)/shoal.deb"
check "dpkg -i installs the package" in_system dpkg -i /tmp/shoal.deb
cp -r "$work/seed" "$(system_path /root)/seed"

# The readers' script, in the system (units-readers.sh).
readers_install

prop() { in_system systemctl show -p "$1" --value "$2"; }
# From the mount table, not mountpoint(1): a dead FUSE mount fails its stat and
# would pass for unmounted.
mounted() { in_system findmnt -rn --mountpoint "$1" >/dev/null; }
healthz() { curl -fsS --max-time 2 "http://$node_addr/healthz" >/dev/null; }

echo "== shoal-node.service"
# The package's example config, rewritten in place as an operator edits it (its
# owner and mode stay the package's); the keys come from /etc/default.
cat >"$(system_path /etc/shoal/node.toml)" <<TOML
[origin]
endpoint = "http://$(cat "$work/origin.addr")"
region = "us-east-1"
addressing = "path"
[origin.credentials]
access_key_id = "units"
secret_access_key_env = "SHOAL_ORIGIN_SECRET"
[node]
listen = "$node_addr"
access_log = "/var/log/shoal/access.log"
block_size = "1MiB"
shutdown_timeout = "5s"
[cache]
ram_size = "64MiB"
disk_size = "256MiB"
data_dir = "/var/cache/shoal"
[auth]
mode = "sigv4"
[[auth.keys]]
access_key_id = "units-cluster"
secret_access_key_env = "SHOAL_CLUSTER_SECRET"
allow = ["read:*", "list:*"]
TOML
install -m 0600 /dev/stdin "$(system_path /etc/default/shoal-node)" <<ENV
SHOAL_ORIGIN_SECRET=units-secret-0123456789
SHOAL_CLUSTER_SECRET=units-cluster-secret-0123
ENV
type=$(prop Type $node)
if [ "$type" = notify ]; then ok "shoal-node is Type=notify"; else bad "shoal-node is Type=notify (Type=$type)"; fi
t0=$(date +%s%N)
in_system systemctl start $node >"$work/start.log" 2>&1
start_rc=$?; took=$(ms "$t0")
# No retry: the unit is started, so the node must answer now.
if [ $start_rc -eq 0 ] && healthz; then
  ok "systemctl start shoal-node returned in $took ms and /healthz answered at once"
else
  bad "systemctl start shoal-node returns only when /healthz answers (start rc $start_rc)"
  sed 's/^/     /' "$work/start.log"
  in_system journalctl -u $node --no-pager -n 10 | sed 's/^/     /'
fi

old=$(prop MainPID $node); restart_sec=$(prop RestartUSec $node)
t0=$(date +%s%N)
in_system systemctl kill -s KILL $node
new=0 state=
for _ in $(seq 200); do
  new=$(prop MainPID $node); state=$(prop ActiveState $node)
  [ "$state" = active ] && [ "$new" != 0 ] && [ "$new" != "$old" ] && healthz && break
  sleep 0.05
done
took=$(ms "$t0")
# Its RestartSec, then a start: within RestartSec and 3 s.
limit=$(($(echo "$restart_sec" | sed -n 's/^\([0-9]*\)s$/\1/p') * 1000 + 3000))
if [ "$state" = active ] && [ "$new" != "$old" ] && [ "$took" -le "$limit" ] && healthz; then
  ok "SIGKILLed shoal-node restarted by systemd in $took ms (RestartSec=$restart_sec), MainPID $old -> $new, NRestarts=$(prop NRestarts $node)"
else
  bad "SIGKILLed shoal-node restarted within RestartSec=$restart_sec (after $took ms: $state, MainPID $old -> $new)"
fi

seen=$(in_system journalctl -u $node --no-pager -o cat | wc -l)
t0=$(date +%s%N)
in_system systemctl stop $node
took=$(ms "$t0")
state=$(prop ActiveState $node); result=$(prop Result $node)
# What systemd said of this stop: a node that did not end on SIGTERM within
# TimeoutStopSec is killed (Result=timeout, "...with signal SIGKILL").
in_system journalctl -u $node --no-pager -o cat | tail -n +$((seen + 1)) >"$work/stop.log"
if [ "$state" = inactive ] && [ "$result" = success ] && grep -q 'Deactivated successfully' "$work/stop.log" &&
  ! grep -qE 'SIGKILL|status=9|[Tt]imed out' "$work/stop.log"; then
  ok "systemctl stop shoal-node: stopped in $took ms, ActiveState=$state Result=$result, ended on SIGTERM (no SIGKILL)"
else
  bad "systemctl stop shoal-node stops cleanly (ActiveState=$state Result=$result)"
  sed 's/^/     /' "$work/stop.log"
fi
check "shoal-node started again for the mounts" bash -c "nsenter -t $SYSTEM_LEADER -a systemctl start $node && curl -fsS --max-time 2 http://$node_addr/healthz"

echo "== shoal-mount@data.service"
mount_config() {
  install -m 0600 /dev/stdin "$(system_path /etc/shoal/"$1".toml)" <<TOML
[origin]
endpoint = "http://$(cat "$work/origin.addr")"
region = "us-east-1"
[origin.credentials]
access_key_id = "units"
secret_access_key = "units-secret-0123456789"
[cluster]
nodes = ["$node_addr"]
block_size = "1MiB"
[cluster.credentials]
access_key_id = "units-cluster"
secret_access_key = "units-cluster-secret-0123"
[cache]
ram_size = "64MiB"
[mount]
source = "units"
mountpoint = "$2"
allow_other = true
TOML
  mkdir -p "$(system_path "$2")"
}
mount_config data /mnt/data
t0=$(date +%s%N)
in_system systemctl start $mount >"$work/start.log" 2>&1
start_rc=$?; took=$(ms "$t0")
if [ $start_rc -eq 0 ] && mounted /mnt/data; then
  ok "systemctl start shoal-mount@data returned in $took ms with /mnt/data mounted"
else
  bad "systemctl start shoal-mount@data mounts /mnt/data (start rc $start_rc, $(prop ActiveState $mount))"
  sed 's/^/     /' "$work/start.log"
fi

node_reads() { curl -fsS --max-time 2 "http://$node_addr/metrics" | sed -n 's/^shoal_node_key_requests_total{key="units-cluster"} //p'; }
before=$(node_reads)
bytes=0 same=0
for f in "${files[@]}"; do
  in_system cmp "/mnt/data/$f" "/root/seed/$f" && same=$((same + 1)) && bytes=$((bytes + $(stat -c %s "$work/seed/$f")))
done
after=$(node_reads)
if [ "$same" -eq ${#files[@]} ] && [ "${after:-0}" -gt "${before:-0}" ]; then
  ok "reads byte-exact: $same files, $bytes bytes, through the node ($((after - ${before:-0})) requests with the cluster's key)"
else
  bad "reads byte-exact through the node ($same of ${#files[@]} files the same; node requests ${before:-none} -> ${after:-none})"
fi

status() { in_system shoal-mount --status /mnt/data | sed -n "s/.*\"$1\":\\([0-9]*\\).*/\\1/p"; }
server_before=$(status server)
readers_start /mnt/data
t0=$(date +%s%N)
for i in 1 2 3; do
  in_system systemctl reload $mount
  # systemctl reload returns once the keeper has its SIGHUP; the handover is
  # done when the keeper counts it.
  for _ in $(seq 200); do [ "$(status handovers)" = "$i" ] && break; sleep 0.05; done
  readers_read 2
done
took=$(ms "$t0")
readers_stop >"$work/readers"
read -r calls fails slowest enotconn <"$work/readers"
handovers=$(status handovers)
if [ "$handovers" = 3 ] && [ "$calls" -gt 0 ] && [ "$fails" -eq 0 ]; then
  ok "3 x systemctl reload under 4 readers: $handovers handovers in $took ms, server $server_before -> $(status server); $calls calls, $fails failed, slowest $slowest ms"
else
  bad "3 x systemctl reload under 4 readers: handovers $handovers; $calls calls, $fails failed ($enotconn ENOTCONN), slowest $slowest ms"
fi

keeper=$(prop MainPID $mount)
server=$(in_system pgrep -P "$keeper" -x shoal-mount | head -1)
readers_start /mnt/data
t0=$(date +%s%N)
in_system kill -KILL "$server"
for _ in $(seq 200); do [ "$(status restarts)" = 1 ] && break; sleep 0.05; done
took=$(ms "$t0")
readers_stop >"$work/readers"
read -r calls fails slowest enotconn <"$work/readers"
if [ "$(status restarts)" = 1 ] && [ "$(status server)" != "$server" ] && [ "$calls" -gt 0 ] && [ "$fails" -eq 0 ] &&
  [ "$(prop MainPID $mount)" = "$keeper" ]; then
  ok "kill -KILL of the server ($server, child of the keeper $keeper, MainPID) under 4 readers: served again by $(status server) in $took ms; $calls calls, $fails failed, $enotconn ENOTCONN, slowest $slowest ms"
else
  bad "kill -KILL of the server under 4 readers: restarts $(status restarts), server $server -> $(status server); $calls calls, $fails failed, $enotconn ENOTCONN, slowest $slowest ms"
fi

# systemctl reload shoal-node under the readers (through the mount) and a
# poller of /healthz: the new process takes the listening socket and the disk
# tier over and becomes the unit's MainPID; no connection is refused, no read
# fails, and the new process fetches nothing from the origin (the blocks were
# on the disk it took over).
cat >"$(system_path /root)/poller.sh" <<POLLER
#!/bin/bash
stop=\$1 out=\$2 calls=0 refused=0 failed=0
while [ ! -e "\$stop" ]; do
  curl -fsS -o /dev/null --max-time 5 "http://$node_addr/healthz"; rc=\$?
  calls=\$((calls + 1))
  if [ \$rc -eq 7 ]; then refused=\$((refused + 1)); elif [ \$rc -ne 0 ]; then failed=\$((failed + 1)); fi
done
echo "\$calls \$refused \$failed" >"\$out"
POLLER
chmod +x "$(system_path /root)/poller.sh"
origin_bytes() { curl -fsS --max-time 2 "http://$node_addr/metrics" | awk '$1 == "shoal_node_origin_bytes_total" { print $2 }'; }
node_old=$(prop MainPID $node)
rm -f "$(system_path /tmp)"/poller-*
in_system /root/poller.sh /tmp/poller-stop /tmp/poller-out &
poller=$!
readers_start /mnt/data
t0=$(date +%s%N)
in_system systemctl reload $node
node_new=$node_old
for _ in $(seq 200); do
  node_new=$(prop MainPID $node)
  [ "$node_new" != "$node_old" ] && [ "$node_new" != 0 ] && [ "$(prop ActiveState $node)" = active ] &&
    ! in_system kill -0 "$node_old" 2>/dev/null && break
  sleep 0.05
done
took=$(ms "$t0")
readers_read 2
refetched=$(origin_bytes)
readers_stop >"$work/readers"
touch "$(system_path /tmp)/poller-stop"
wait "$poller"
read -r calls fails slowest enotconn <"$work/readers"
read -r polls refused pfailed <"$(system_path /tmp)/poller-out" || { polls=0; refused=0; pfailed=1; }
if [ "$node_new" != "$node_old" ] && ! in_system kill -0 "$node_old" 2>/dev/null && [ "$(prop ActiveState $node)" = active ] &&
  [ "$calls" -gt 0 ] && [ "$fails" -eq 0 ] && [ "$polls" -gt 0 ] && [ "$refused" -eq 0 ] && [ "$pfailed" -eq 0 ] &&
  [ "${refetched:-unknown}" = 0 ]; then
  ok "systemctl reload shoal-node under readers: MainPID $node_old -> $node_new in $took ms; $calls reads, $fails failed; $polls /healthz, $refused refused; origin bytes since: $refetched"
else
  bad "systemctl reload shoal-node under readers: MainPID $node_old -> $node_new ($(prop ActiveState $node)); $calls reads, $fails failed; $polls /healthz, $refused refused, $pfailed failed; origin bytes since: ${refetched:-unknown}"
  in_system journalctl -u $node --no-pager -o cat | tail -8 | sed 's/^/     /'
fi

# The whole unit killed (the keeper with its server: what the OOM killer or a
# crash of the keeper does) leaves a dead mount; systemd starts it again after
# RestartSec, and the mount must come back in its place.
restart_sec=$(prop RestartUSec $mount)
t0=$(date +%s%N)
in_system systemctl kill -s KILL $mount
for _ in $(seq 300); do
  [ "$(prop ActiveState $mount)" = active ] && [ "$(prop MainPID $mount)" != "$keeper" ] &&
    in_system cmp -s /mnt/data/node.toml /root/seed/node.toml && break
  sleep 0.05
done
took=$(ms "$t0")
detached=$(in_system journalctl -u $mount --no-pager -o cat | grep -c 'left by a keeper that died')
if [ "$(prop ActiveState $mount)" = active ] && in_system cmp -s /mnt/data/node.toml /root/seed/node.toml && [ "$detached" -gt 0 ]; then
  ok "systemctl kill -s KILL shoal-mount@data (keeper and server): the dead mount detached and mounted again by systemd in $took ms (RestartSec=$restart_sec), NRestarts=$(prop NRestarts $mount)"
else
  bad "systemctl kill -s KILL shoal-mount@data: mounted again by systemd (after $took ms: $(prop ActiveState $mount)/$(prop SubState $mount))"
  in_system journalctl -u $mount --no-pager -o cat | tail -3 | sed 's/^/     /'
fi

echo "== journalctl"
journal_has() {
  in_system journalctl -u "$1" --no-pager -o cat >"$work/journal.log"
  local lines escapes
  lines=$(grep -c "$2" "$work/journal.log")
  # A terminal's colours have no place in the journal (journalctl -o cat, json,
  # a log shipper would carry them).
  escapes=$(grep -c $'\e\[' "$work/journal.log")
  if [ "$lines" -gt 0 ] && [ "$escapes" -eq 0 ]; then
    ok "journalctl -u $1: $(wc -l <"$work/journal.log") lines, $lines with '$2', none with terminal escapes"
  else
    bad "journalctl -u $1 shows the program's '$2' ($lines lines), without terminal escapes ($escapes lines with)"
    tail -5 "$work/journal.log" | cat -v | sed 's/^/     /'
  fi
}
journal_has $node "shoal-node .* listening on http://$node_addr"
journal_has $mount "mounted s3://units/ on /mnt/data"

echo "== the node's access log and logrotate"
log=$(system_path /var/log/shoal)
count() { if [ -f "$1" ]; then wc -l <"$1"; else echo 0; fi; }
lines=$(count "$log/access.log")
if [ "$lines" -gt 0 ]; then
  ok "the node writes /var/log/shoal/access.log: $lines lines"
else
  bad "the node writes /var/log/shoal/access.log (${lines} lines; $(ls -ld "$log" 2>&1))"
  in_system journalctl -u $node --no-pager -o cat | grep -i 'access' | tail -3 | sed 's/^/     /'
fi
# The package's logrotate snippet moves it aside and has the node reopen it by
# name (SIGUSR1); a request after that lands in the new file. An unsigned request
# is refused, and refusals are logged too.
in_system logrotate -f /etc/logrotate.d/shoal-node >"$work/logrotate.log" 2>&1
rotated=$?
# Until a request lands in the new file (the node reopens it on its signal, and
# writes its log lines a moment after each answer), within 10 s.
for _ in $(seq 100); do
  curl -s -o /dev/null "http://$node_addr/units/node.toml"
  fresh=$(count "$log/access.log")
  [ "${fresh:-0}" -ge 1 ] && break
  sleep 0.1
done
aside=$(count "$log/access.log.1")
if [ $rotated -eq 0 ] && [ "$aside" -ge "$lines" ] && [ "$fresh" -ge 1 ] && [ "$(prop ActiveState $node)" = active ]; then
  ok "logrotate -f: access.log.1 holds $aside lines, the node writes the new access.log ($fresh lines), still active"
else
  bad "logrotate -f rotates the access log and the node reopens it (rc $rotated, access.log.1 $aside lines, access.log $fresh lines)"
  sed 's/^/     /' "$work/logrotate.log" | tail -5
fi

echo "== stopping the mount"
t0=$(date +%s%N)
in_system systemctl stop $mount
took=$(ms "$t0")
state=$(prop ActiveState $mount); result=$(prop Result $mount)
if ! mounted /mnt/data && [ "$state" = inactive ] && [ "$result" = success ]; then
  ok "systemctl stop shoal-mount@data unmounted /mnt/data in $took ms (ActiveState=$state Result=$result)"
else
  bad "systemctl stop shoal-mount@data unmounts (mounted: $(mounted /mnt/data && echo yes || echo no), ActiveState=$state Result=$result)"
fi

echo "== at boot: fstab and enabled units"
# The book's fstab line (docs/src/mount.md) as an operator copies it, with this test's bucket,
# mountpoint and config.
book_line=$(grep -m1 ' fuse\.shoal .*_netdev' docs/src/mount.md)
opts=$(echo "$book_line" | awk '{ print $4 }' | sed 's#config=[^,]*#config=/etc/shoal/fstab.toml#')
line="units /mnt/fstab fuse.shoal $opts 0 0"
mount_config fstab /mnt/fstab
echo "$line" >>"$(system_path /etc/fstab)"
echo "     fstab: $line"
check "systemctl enable shoal-node shoal-mount@data" in_system systemctl enable $node $mount
t0=$(date +%s%N)
system_halt
if system_boot "$name" && [ "$(in_system systemctl is-system-running)" = running ]; then
  ok "halted and booted again in $(ms "$t0") ms (state running)"
else
  bad "halted and booted again"
  finish
fi
fstab_unit=$(in_system systemd-escape -p --suffix=mount /mnt/fstab)
# Monotonic microseconds since boot: when the node was ready, and when each mount
# began to mount.
ready=$(prop ActiveEnterTimestampMonotonic $node)
for m in "$fstab_unit:/mnt/fstab" "$mount:/mnt/data"; do
  unit=${m%%:*} dir=${m#*:}
  began=$(prop InactiveExitTimestampMonotonic "$unit")
  same=0
  for f in "${files[@]}"; do in_system cmp "$dir/$f" "/root/seed/$f" && same=$((same + 1)); done
  if mounted "$dir" && [ "$same" -eq ${#files[@]} ]; then
    ok "$unit: $dir mounted at boot, $same files byte-exact"
  else
    bad "$unit: $dir mounted at boot and byte-exact ($(prop ActiveState "$unit"), $same of ${#files[@]} files the same)"
    in_system journalctl -b -u "$unit" --no-pager -o cat | tail -5 | sed 's/^/     /'
  fi
  if [ "${began:-0}" -ge "${ready:-1}" ] && in_system systemctl show -p After "$unit" | grep -qw $node; then
    ok "$unit ordered after $node: began mounting $(((began - ready) / 1000)) ms after the node was ready"
  else
    bad "$unit mounts after $node is ready (node ready at ${ready:-?} us, mount began at ${began:-?} us; After=$(prop After "$unit"))"
  fi
done

finish
