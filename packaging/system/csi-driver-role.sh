# Sourced by packaging/system/csi.sh (its helpers, its booted system and its plugin
# unit): the driver's own AWS role reaching mounts under the host launcher. The
# plugin runs as the DaemonSet's pod with IRSA does: AWS_ROLE_ARN, and
# AWS_WEB_IDENTITY_TOKEN_FILE naming a file that exists only in the pod's own
# root (kubelet's projected token, mounted there). The mounts are units of the
# host's systemd, which cannot see that root. STS and the origin its keys read
# are the test origin's AWS services (testorigin/src/aws_mock.rs).

echo "== the driver's own web-identity role (IRSA), its token only in the plugin's root"
role_token=irsa-token-$stamp
role_token_rotated=irsa-token-rotated-$stamp
role_arn=arn:aws:iam::123456789012:role/shoal-csi-driver
mkdir -p "$work/role-seed/data"
head -c 1500007 /dev/urandom >"$work/role-seed/data/one.bin"
head -c 70001 /dev/urandom >"$work/role-seed/data/two.bin"
target/release/shoal-test-origin --listen 127.0.38.7:0 --bucket role --seed "$work/role-seed" \
  --addr-file "$work/role-origin.addr" --aws-url-file "$work/role-aws.url" \
  --web-identity "$role_token=$role_arn" --web-identity "$role_token_rotated=$role_arn" 2>"$work/role-origin.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/role-origin.addr" ] && break; sleep 0.1; done
role_origin=$(cat "$work/role-origin.addr" 2>/dev/null)
role_sts=$(cat "$work/role-aws.url" 2>/dev/null)
check "an origin ($role_origin) whose keys only its STS hands out ($role_sts), for web identity of role $role_arn" \
  test -n "$role_origin" -a -n "$role_sts"
cp -r "$work/role-seed/data" "$(system_path /root/expect)/role"

# Where kubelet projects the plugin pod's token on the host, and where the pod's
# container sees it (EKS's path).
role_projected=$pods/shoal-csi-node/volumes/kubernetes.io~projected/aws-iam-token
role_in_pod=/var/run/secrets/eks.amazonaws.com/serviceaccount
in_system install -d -m 0755 "$role_projected"
printf '%s' "$role_token" | in_system install -m 0600 /dev/stdin "$role_projected/token"
cat >"$(system_path /etc/shoal/mount-role.toml)" <<TOML
# No keys and no cluster: the credential chain's web identity, straight to the origin.
[origin]
endpoint = "http://$role_origin"
region = "us-east-1"
retry_base = "5ms"
retry_max = "50ms"
TOML
# The plugin's unit as the pod's container: a mount namespace of its own in which
# the projected token is mounted at EKS's path; everything else (kubelet's
# directories, where its binds go) shared with the host, as Bidirectional
# propagation shares them. Static keys out of its environment: the role alone.
mkdir -p "$(system_path /etc/systemd/system/shoal-csi-plugin.service.d)"
cat >"$(system_path /etc/systemd/system/shoal-csi-plugin.service.d/role.conf)" <<UNIT
[Service]
Environment=AWS_ROLE_ARN=$role_arn
Environment=AWS_WEB_IDENTITY_TOKEN_FILE=$role_in_pod/token
Environment=AWS_ENDPOINT_URL_STS=$role_sts
Environment=AWS_EC2_METADATA_DISABLED=true
UnsetEnvironment=AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
ExecStart=
ExecStart=/usr/bin/unshare --mount --propagation unchanged -- /bin/sh -ec 'mount --make-private /run; mkdir -p $role_in_pod; mount --bind -o ro $role_projected $role_in_pod; exec /usr/bin/shoal-csi --endpoint=unix://$socket_in --node-id=$node_name --zone-from-node --state-dir=$plugin_dir --launcher=systemd --mount-bin=$plugin_dir/bin/shoal-mount --default-config=/etc/shoal/mount.toml --kube-api=http://$kube --metrics-addr=$csi_metrics'
UNIT
in_system systemctl daemon-reload
role_invocation=$(plugin InvocationID)
in_system systemctl restart shoal-csi-plugin
wait_back "$role_invocation" || bad "the plugin answers with its role"
role_pid=$(plugin MainPID)
check "the token is at $role_in_pod/token in the plugin's root" \
  test "$(in_system nsenter -t "$role_pid" -m cat "$role_in_pod/token")" = "$role_token"
check "and nowhere at that path on the host, where the mounts' units run" in_system test ! -e "$role_in_pod/token"

role_target_1=$pods/pod-r1/volumes/kubernetes.io~csi/pv-role-1/mount
role_target_2=$pods/pod-r2/volumes/kubernetes.io~csi/pv-role-2/mount
role_publish() { # VOLUME TARGET
  in_system mkdir -p "$(dirname "$2")"
  kubelet publish "$1" "$2" --attr bucket=role --attr prefix=data --attr config=/etc/shoal/mount-role.toml
}
role_published=0
for v in 1 2; do
  t=role_target_$v
  start=$(date +%s%N)
  out=$(role_publish vol-role-$v "${!t}" 2>&1)
  echo "$out" | head -30 | sed "s/^/     publish vol-role-$v: /"
  if [ "$out" = "{}" ]; then
    ok "publish vol-role-$v (the driver's role, a unit of the host's systemd) in $(ms "$start") ms"
    role_published=$((role_published + 1))
  else
    bad "publish vol-role-$v (the driver's role, a unit of the host's systemd)"
  fi
done
if [ "$role_published" = 2 ]; then
  check "both read byte-exact with the role's keys" in_system bash -c "
    for t in '$role_target_1' '$role_target_2'; do
      for f in one.bin two.bin; do cmp \$t/\$f /root/expect/role/\$f || exit 1; done
    done"
  role_unit_1=$(unit_of "$role_target_1")
  role_unit_2=$(unit_of "$role_target_2")
  # Each unit's copy of the token, from the environment file the unit reads.
  role_copy() { in_system sed -n 's/^AWS_WEB_IDENTITY_TOKEN_FILE=//p' "$(in_system systemctl show -p ExecStart --value "$1" | grep -o -- '--env-file [^ ;]*' | cut -d' ' -f2)"; }
  role_copy_1=$(role_copy "$role_unit_1")
  role_copy_2=$(role_copy "$role_unit_2")
  check "each unit reads a copy of its own under $plugin_dir ($role_copy_1, $role_copy_2)" bash -c "
    [[ '$role_copy_1' == $plugin_dir/* && '$role_copy_2' == $plugin_dir/* && '$role_copy_1' != '$role_copy_2' ]] &&
    [ \"\$(nsenter -t $SYSTEM_LEADER -a cat '$role_copy_1')\" = '$role_token' ]"
  in_system stat -c '%n %U:%G %a' "$role_copy_1" "$role_copy_2" | sed 's/^/     /'
  # What a unit's mount may do: the groups its keeper is in (it joins its token
  # group, --token-group) and the capabilities it keeps (sys_admin and
  # sys_resource: CapabilityBoundingSet=, less what it gives up once joined).
  as_unit() { # UNIT COMMAND...
    local u=$1 pid groups
    shift
    pid=$(in_system systemctl show -p MainPID --value "$u")
    groups=$(in_system sed -n 's/^Groups:[[:space:]]*//p' "/proc/$pid/status" | xargs | tr ' ' ',')
    in_system setpriv --groups "$groups" --bounding-set -all,+sys_admin,+sys_resource -- "$@"
  }
  # Every process of each unit (its keeper and its server), as the kernel has
  # them: in the volume's token group alone, with sys_admin and sys_resource
  # (0x1200000, less what the system itself lacks: a host without
  # sys_resource) in every set and the bounding set, and nothing else: not
  # setgid, which would let it join another volume's group.
  for u in "$role_unit_1" "$role_unit_2"; do
    check "$u's processes: one group, the token's ($(in_system stat -c %g "$(role_copy "$u")")), and only sys_admin, sys_resource" in_system bash -c "
      caps=\$(printf '%016x' \$((0x1200000 & 0x\$(sed -n 's/^CapBnd:[[:space:]]*//p' /proc/1/status))))
      gid=\$(stat -c %g \"\$(sed -n 's/^AWS_WEB_IDENTITY_TOKEN_FILE=//p' \$(systemctl show -p ExecStart --value '$u' | grep -o -- '--env-file [^ ;]*' | cut -d' ' -f2))\")
      pids=\$(cat /sys/fs/cgroup\$(systemctl show -p ControlGroup --value '$u')/cgroup.procs /sys/fs/cgroup/unified\$(systemctl show -p ControlGroup --value '$u')/cgroup.procs 2>/dev/null | sort -u)
      [ \$(wc -w <<<\"\$pids\") -ge 2 ] || { echo \"processes: \$pids\"; exit 1; }
      for p in \$pids; do
        s=\$(grep -E '^(Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb)' /proc/\$p/status | xargs); echo \"\$p \$(tr '\\0' ' ' </proc/\$p/cmdline | cut -c1-60): \$s\"
        [ \"\$s\" = \"Groups: \$gid CapInh: 0000000000000000 CapPrm: \$caps CapEff: \$caps CapBnd: \$caps CapAmb: 0000000000000000\" ] || exit 1
      done" && sed 's/^/     /' "$work/check.log"
  done
  own=$(as_unit "$role_unit_1" cat "$role_copy_1" 2>&1)
  check "$role_unit_1, as systemd runs it, reads its own token" test "$own" = "$role_token"
  denied=$(as_unit "$role_unit_1" cat "$role_copy_2" 2>&1)
  check "$role_unit_1 cannot read vol-role-2's token: $denied" grep -q 'Permission denied' <<<"$denied"
  denied=$(as_unit "$role_unit_2" cat "$role_copy_1" 2>&1)
  check "$role_unit_2 cannot read vol-role-1's token: $denied" grep -q 'Permission denied' <<<"$denied"
  # kubelet rotates the projected token: each copy follows.
  printf '%s' "$role_token_rotated" | in_system install -m 0600 /dev/stdin "$role_projected/token.new"
  in_system mv "$role_projected/token.new" "$role_projected/token"
  start=$(date +%s%N)
  for _ in $(seq 1500); do
    [ "$(in_system cat "$role_copy_1" "$role_copy_2")" = "$role_token_rotated$role_token_rotated" ] && break
    sleep 0.1
  done
  check "the rotated token reached both copies in $(ms "$start") ms" \
    test "$(in_system cat "$role_copy_1" "$role_copy_2")" = "$role_token_rotated$role_token_rotated"
  for v in 1 2; do
    t=role_target_$v
    check "unpublish vol-role-$v" kubelet unpublish vol-role-$v "${!t}"
  done
fi
# The plugin as the other parts run it again.
rm -f "$(system_path /etc/systemd/system/shoal-csi-plugin.service.d/role.conf)"
in_system systemctl daemon-reload
role_invocation=$(plugin InvocationID)
in_system systemctl restart shoal-csi-plugin
wait_back "$role_invocation" || bad "the plugin answers without its role"
