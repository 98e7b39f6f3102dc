# Sourced by packaging/system/csi.sh (its helpers, its booted system and its plugin
# unit): a volume whose nodes come from the nodes' Service's EndpointSlices in the
# Kubernetes API (packaging/system/kube-api.py), watched, never from the host's
# resolver.

echo "== nodes from the Service's EndpointSlices: no node list, no host DNS"
# Three more nodes on the host, known to the mount only through the API: a and
# a2 of zone-a, b of zone-b. Each is its own slice (a slice names its port).
start_node() { # NAME IP
  sed "s/listen = \"127.0.38.2:0\"/listen = \"$2:0\"/" "$work/node.toml" >"$work/node-$1.toml"
  RUST_LOG=info target/release/shoal-node --config "$work/node-$1.toml" 2>"$work/node-$1.log" &
  pids+=($!)
}
addr_of() {
  for _ in $(seq 100); do
    a=$(sed -n 's/.*listening on http:\/\/\([0-9.:]*\).*/\1/p' "$work/node-$1.log" | head -1)
    [ -n "$a" ] && { echo "$a"; return; }
    sleep 0.1
  done
}
start_node a 127.0.38.4; start_node a2 127.0.38.5; start_node b 127.0.38.6
node_a=$(addr_of a); node_a2=$(addr_of a2); node_b=$(addr_of b)
served() { curl -s "http://$1/metrics" | awk '$1 ~ /^shoal_node_bytes_served_total/ {s += $2} END {print s + 0}'; }
slice() { # NAME ADDRESS READY ZONE
  curl -sf -X PUT "http://$kube/_test/slices/shoal/$1" \
    -d "{\"service\": \"shoal-node\", \"port_name\": \"s3\", \"port\": ${2##*:}, \"endpoints\": [{\"address\": \"${2%:*}\", \"ready\": $3, \"zone\": \"$4\"}]}" >/dev/null
}
slice shoal-node-a "$node_a" true zone-a
slice shoal-node-b "$node_b" true zone-b
check "nodes a ($node_a), a2 ($node_a2), b ($node_b) run; slices of a (zone-a) and b (zone-b) in the API" \
  test -n "$node_a" -a -n "$node_a2" -a -n "$node_b"
cat >"$(system_path /etc/shoal/mount-slices.toml)" <<TOML
# The nodes: the ready endpoints of Service shoal/shoal-node. The API's address
# and a token come from the plugin, which lends its own.
[origin]
endpoint = "http://$origin"
region = "us-east-1"
[cluster]
kubernetes = "shoal/shoal-node"
kubernetes_port = "s3"
connect_timeout = "300ms"
first_byte_timeout = "1s"
stall_timeout = "1s"
[cluster.credentials]
access_key_id = "$cluster_key"
secret_access_key_env = "SHOAL_CLUSTER_SECRET"
TOML
# The system's resolver answers nothing: a name anywhere would fail the mount.
in_system bash -c 'rm -f /etc/resolv.conf; echo "nameserver 127.0.0.254" >/etc/resolv.conf'
check "the system resolves no name (getent hosts shoal-node.shoal.svc.cluster.local fails)" \
  in_system bash -c '! timeout 20 getent hosts shoal-node.shoal.svc.cluster.local'
target_s=$pods/pod-k/volumes/kubernetes.io~csi/pv-slices/mount
in_system mkdir -p "$(dirname "$target_s")"
check "publish vol-slices (config mount-slices.toml)" kubelet publish vol-slices "$target_s" --attr bucket=csi \
  --attr prefix=slices --attr config=/etc/shoal/mount-slices.toml
check "the mount's copy of its config names no node and no DNS name, and the plugin's API access" \
  in_system bash -c "f=\$(grep -l 'shoal/shoal-node' $plugin_dir/volumes/*/mount.toml) && cat \$f &&
    grep -q '^kubernetes_api = \"http://$kube\"' \$f && grep -q '^kubernetes_token_file = \"$plugin_dir/kube/token\"' \$f &&
    ! grep -Eq '^(nodes|dns) ' \$f"
unit_s=$(unit_of "$target_s")
# The mount's journal says each change of the nodes it ranks ("nodes=N of=M":
# N of its zone of the M ready).
changes() { in_system journalctl --no-pager -o cat -u "$unit_s" | grep -c "cluster membership changed.*$1"; }
ranks() { # PATTERN SEEN-BEFORE: waits for one more such change
  for _ in $(seq 200); do [ "$(changes "$1")" -gt "$2" ] && return 0; sleep 0.05; done
  in_system journalctl --no-pager -o cat -u "$unit_s" | tail -5; return 1
}
read_files() { # FIRST LAST: each file through the volume, byte-exact
  in_system bash -c "for i in \$(seq $1 $2); do f=\$(printf f-%03d \$i); cmp '$target_s'/\$f /root/expect/slices/\$f || exit 1; done"
}
check "files 0-19 read byte-exact" read_files 0 19
a0=$(served "$node_a")
check "node a served them ($a0 bytes), a2 (in no slice) nothing" test "$a0" -gt 0 -a "$(served "$node_a2")" = 0
# A reader of its own, on and on, while the slices change.
in_system bash -c "
  rm -f /run/slices.stop; n=0; failed=0
  while [ ! -e /run/slices.stop ]; do
    for i in \$(seq 100 119); do f=\$(printf f-%03d \$i)
      cmp -s '$target_s'/\$f /root/expect/slices/\$f || failed=\$((failed + 1)); n=\$((n + 1))
    done
    echo \"\$n \$failed\" >/run/slices.out
  done" &
slices_reader=$!
pids+=($slices_reader)
# a2 becomes ready in zone-a: the mount's watch hears it, and a2 takes its share.
slice shoal-node-a2 "$node_a2" true zone-a
joined=$(date +%s%N); i=20
while [ "$(served "$node_a2")" = 0 ] && [ $i -lt 60 ]; do read_files $i $i; i=$((i + 1)); done
check "node a2 served its first read $(ms "$joined") ms after its endpoint was added ($((i - 20)) files read meanwhile, beside the reader)" test "$(served "$node_a2")" -gt 0
# a goes not ready: it leaves the ranking.
seen=$(changes "nodes=1 of=2")
slice shoal-node-a "$node_a" false zone-a
check "the mount ranks a2 alone of zone-a (a not ready, b of zone-b)" ranks "nodes=1 of=2" "$seen"
# What was in flight to a when it left may still land: its count settles first.
a1=$(served "$node_a")
for _ in $(seq 50); do sleep 0.1; [ "$(served "$node_a")" = "$a1" ] && break; a1=$(served "$node_a"); done; a21=$(served "$node_a2")
check "files 60-79 read byte-exact with a not ready" read_files 60 79
check "node a, not ready, served none of them ($(($(served "$node_a") - a1)) bytes); a2 served $(($(served "$node_a2") - a21))" \
  test "$(served "$node_a")" = "$a1" -a "$(served "$node_a2")" -gt "$a21"
check "node b, of zone-b, served this zone-a mount nothing" test "$(served "$node_b")" = 0
# The API restarts and forgets its history: the mount lists again (410 on its
# resumed watch) and sees a ready again.
seen=$(changes "nodes=2 of=3")
curl -sf -X POST "http://$kube/_test/expire" >/dev/null
slice shoal-node-a "$node_a" true zone-a
check "the mount ranks a and a2 again after the API's restart" ranks "nodes=2 of=3" "$seen"
a2=$(served "$node_a")
check "files 80-99 read byte-exact after the API's restart" read_files 80 99
check "node a, ready again, serves again ($(($(served "$node_a") - a2)) bytes)" test "$(served "$node_a")" -gt "$a2"
in_system touch /run/slices.stop
wait "$slices_reader" 2>/dev/null
out=$(in_system cat /run/slices.out 2>/dev/null)
check "the reader beside the changes: ${out%% *} reads, ${out##* } failed" test "${out##* }" = 0 -a "${out%% *}" -gt 0
check "the mount watched with bookmarks from a resourceVersion, with the plugin's token (no 401)" bash -c "
  grep -E '^200 GET .*endpointslices.*watch=1.*allowWatchBookmarks=true' '$work/kube.log' | grep -q resourceVersion= &&
  ! grep -q '^401' '$work/kube.log'"
grep -c endpointslices "$work/kube.log" | sed 's/^/     API requests for the slices: /'
check "unpublish vol-slices" kubelet unpublish vol-slices "$target_s"
