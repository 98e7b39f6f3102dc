# Sourced by packaging/system/csi.sh (its helpers, its booted system and its plugin
# unit): a DaemonSet rollout with a newer shoal-mount. Three staged volumes, a
# pod reading each; the init container installs the new shoal-mount at the host
# path the units run, the plugin restarts, and hands every mount over to it
# through the mount's keeper (the unit, its keeper and the kernel connection
# stay; the server is new). Then every mount's metrics through the plugin's.

echo "== a rollout with a newer shoal-mount: every mount handed over under a reader"
up_targets=()
for v in 1 2 3; do
  up_staging=/var/lib/kubelet/plugins/kubernetes.io/csi/csi.shoal/pv-up-$v/globalmount
  up_target=$pods/pod-up-$v/volumes/kubernetes.io~csi/pv-up-$v/mount
  in_system mkdir -p "$up_staging" "$(dirname "$up_target")"
  kubelet stage vol-up-$v "$up_staging" --attr bucket=csi --attr prefix=alpha >"$work/check.log" 2>&1 &&
    kubelet publish vol-up-$v "$up_target" --staging "$up_staging" --attr bucket=csi --attr prefix=alpha >>"$work/check.log" 2>&1 ||
    { bad "stage and publish vol-up-$v"; cat "$work/check.log"; }
  up_targets+=("$up_target")
done
check "three volumes staged and published: three shares, three units ($(units | wc -l))" test "$(units | wc -l)" = 3
# Each unit's mount (the share under the state directory) and its keeper's status.
up_shares=$(units | awk '{print $NF}')
up_status() { # SHARE FIELD
  local dir
  dir=$(in_system bash -c "grep -l '\"target\": \"$1\"' $plugin_dir/volumes/*/volume.json | head -1 | xargs dirname")
  in_system /usr/bin/shoal-mount --status "$1" --control-socket "$dir/control.sock" |
    python3 -c "import json, sys; print(json.load(sys.stdin).get('$2'))"
}
for s in $up_shares; do in_system /usr/bin/shoal-mount --status "$s" --control-socket \
  "$(in_system bash -c "dirname \$(grep -l '\"target\": \"$s\"' $plugin_dir/volumes/*/volume.json)")/control.sock" |
  sed "s/^/     shoal-mount --status: /"; done
old_build=$(in_system "$plugin_dir/bin/shoal-mount" --version | cut -d' ' -f2)
for s in $up_shares; do
  check "$s runs the driver's shoal-mount $old_build" test "$(up_status "$s" server_build)" = "${old_build#*+}"
done
# A reader in each: cmp of every file, over and over.
up_readers=()
for i in 1 2 3; do
  in_system bash -c "
    rm -f /run/up.stop; calls=0; failed=0
    while [ ! -e /run/up.stop ]; do
      for f in big.bin small-1.bin small-2.bin small-3.bin; do
        cmp -s '${up_targets[$((i - 1))]}'/\$f /root/expect/alpha/\$f || failed=\$((failed + 1))
        calls=\$((calls + 1))
      done
      echo \"\$calls \$failed\" >/run/up-$i.out
    done" &
  up_readers+=($!)
  pids+=($!)
done
up_calls() { local c; c=$(cut -d' ' -f1 "$(system_path "/run/up-$1.out")" 2>/dev/null); echo "${c:-0}"; }
up_read_on() { # every reader N more passes
  local i want
  for i in 1 2 3; do
    want=$(($(up_calls $i) + 4 * $1))
    for _ in $(seq 600); do [ "$(up_calls $i)" -ge "$want" ] && break; sleep 0.05; done
  done
}
up_read_on 2
keepers_before=$(in_system systemctl show -p MainPID --value $(units | awk '{print $1}') | tr '\n' ' ')
servers_before=$(for s in $up_shares; do up_status "$s" server; done | tr '\n' ' ')
# The init container of the new DaemonSet: a newer build at the units' path.
in_system bash -c "cp /usr/bin/shoal-mount /root/shoal-mount.new && printf '\\0a newer build' >>/root/shoal-mount.new &&
  install -m 0755 /root/shoal-mount.new $plugin_dir/bin/shoal-mount"
new_build=$(in_system "$plugin_dir/bin/shoal-mount" --version | cut -d' ' -f2)
check "a newer shoal-mount at $plugin_dir/bin: $old_build -> $new_build" test "$new_build" != "$old_build" -a -n "${new_build#*+}"
up_invocation=$(plugin InvocationID)
start=$(date +%s%N)
in_system systemctl restart shoal-csi-plugin
wait_back "$up_invocation" || bad "the plugin answers after the rollout"
up_journal() { in_system journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID="$invocation"; }
for _ in $(seq 600); do up_journal | grep -q ' mounts against shoal-mount ' && break; sleep 0.1; done
up_journal | grep -E 'handed .* over from|mounts against shoal-mount' | sed 's/^/     plugin: /'
handed=$(up_journal | grep -c 'handed .* over from shoal-mount .* to .*'"${new_build#*+}"' in [0-9]* ms')
check "the restarted plugin handed the 3 mounts over to $new_build, one at a time ($handed handovers; $(ms "$start") ms from the restart)" \
  test "$handed" = 3
up_read_on 2
for s in $up_shares; do
  check "$s runs $new_build now" test "$(up_status "$s" server_build)" = "${new_build#*+}"
done
keepers_after=$(in_system systemctl show -p MainPID --value $(units | awk '{print $1}') | tr '\n' ' ')
servers_after=$(for s in $up_shares; do up_status "$s" server; done | tr '\n' ' ')
check "the units and their keepers stayed (MainPIDs $keepers_before-> $keepers_after), the servers are new ($servers_before-> $servers_after)" \
  bash -c "[ '$keepers_before' = '$keepers_after' ] && for p in $servers_after; do [[ ' $servers_before ' != *\" \$p \"* ]] || exit 1; done"
touch "$(system_path /run/up.stop)"
wait "${up_readers[@]}"
for i in 1 2 3; do
  # (Not into `failed`: that is csi.sh's count of failed checks.)
  read -r calls up_failed <"$(system_path "/run/up-$i.out")"
  check "the reader of vol-up-$i across the handover: $calls reads, $up_failed failed" test "$calls" -gt 0 -a "$up_failed" = 0
done
stats=$(kubelet stats vol-up-1 "${up_targets[0]}" 2>&1)
check "vol-up-1's condition names its version: $stats" grep -q "served by shoal-mount $new_build (the driver's)" <<<"$stats"
curl -s "http://$csi_metrics/metrics" >"$work/page"
check "the plugin's metrics: 3 handovers done, no mount behind, each mount on $new_build" bash -c "
  grep -qx 'shoal_csi_handovers_total{result=\"done\"} 3' '$work/page' && grep -qx 'shoal_csi_mounts_behind 0' '$work/page' &&
  [ \"\$(grep -c '^shoal_csi_mount_version{.*version=\"$new_build\"} 1' '$work/page')\" = 3 ]"
grep '^shoal_csi_handover_seconds_sum\|^shoal_csi_handover_seconds_count' "$work/page" | sed 's/^/     /'
check "each mount's own metrics through the plugin's page (3 mounts' shoal_mount_read_bytes_total, labelled)" bash -c "
  [ \"\$(grep -c '^shoal_mount_read_bytes_total{volume=\"vol-up-[123]\",mount=\"$plugin_dir/shares/' '$work/page')\" = 3 ]"
for v in 1 2 3; do
  kubelet unpublish vol-up-$v "${up_targets[$((v - 1))]}" >/dev/null &&
    kubelet unstage vol-up-$v /var/lib/kubelet/plugins/kubernetes.io/csi/csi.shoal/pv-up-$v/globalmount >/dev/null ||
    bad "unpublish and unstage vol-up-$v"
done
for _ in $(seq 100); do [ -z "$(units)" ] && break; sleep 0.1; done
check "no unit left" test -z "$(units)"

echo "== a mount that cannot start: what kubelet is told"
bad_target=$pods/pod-bad/volumes/kubernetes.io~csi/pv-bad/mount
in_system mkdir -p "$(dirname "$bad_target")"
told=$(kubelet publish vol-bad "$bad_target" --attr bucket=no-such-bucket-$stamp 2>&1)
echo "$told" | sed 's/^/     kubelet is told: /'
check "the error names the cause, in the mount's own words" bash -c \
  "grep -q '^INTERNAL: ' <<<'$told' && grep -q 'bucket \"no-such-bucket-$stamp\" does not exist' <<<'$told'"
check "and nothing is left of it" bash -c "[ -z \"\$(nsenter -t $SYSTEM_LEADER -a systemctl list-units --all --plain --no-legend 'shoal-csi-vol-bad*')\" ] &&
  ! nsenter -t $SYSTEM_LEADER -a test -e '$bad_target'"
curl -s "http://$csi_metrics/metrics" >"$work/page"
check "counted: a failed launch, a publish failed for its mount" bash -c "
  grep -qx 'shoal_csi_launches_total{result=\"failed\"} 1' '$work/page' &&
  grep -qx 'shoal_csi_failures_total{call=\"publish\",reason=\"mount\"} 1' '$work/page'"
