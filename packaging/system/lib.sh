# A booted Debian system for the packaging's system tests: systemd as PID 1 in a
# container (systemd-nspawn) sharing the host's network, so that units, reloads,
# kills and boots are systemd's own and not a stand-in's. Sourced by
# packaging/system-test.sh and the files under packaging/system/.
#
# The root is built once per machine (debootstrap from the mirror apt uses) and kept
# under target/system/root; every boot runs on an overlay of it (target/system/runs/
# NAME), so a test may install, break and reboot freely and the next one starts
# clean. Nothing here needs the host to run systemd.

system_dir=${SYSTEM_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/target/system}
SYSTEM_ROOT=$system_dir/root
# What the root holds beyond minbase: systemd to boot, what the package depends
# on, and what an operator's checks use.
system_packages=systemd,systemd-sysv,dbus,fuse3,adduser,procps,util-linux,mount,curl,ca-certificates,logrotate

# Installs what building and booting a root takes, on the host.
system_tools() {
  command -v debootstrap >/dev/null && command -v systemd-nspawn >/dev/null && return 0
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    debootstrap systemd-container >/dev/null
}

# Builds the root unless it is there already (about 90 s and 300 MB).
system_root() {
  [ -x "$SYSTEM_ROOT/lib/systemd/systemd" ] && [ -f "$SYSTEM_ROOT/.shoal-root" ] &&
    [ "$(cat "$SYSTEM_ROOT/.shoal-root")" = "$system_packages" ] && return 0
  system_tools || return 1
  rm -rf "$SYSTEM_ROOT" "$SYSTEM_ROOT.tmp"
  mkdir -p "$system_dir"
  local mirror
  # (Either file may be missing: no status of this lookup may end a caller
  # running under `set -e`.)
  mirror=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
    sed -n 's/^URIs: *//p; s/^deb \(\[[^]]*\] \)\?\(http[^ ]*\) .*/\2/p' | grep -v security | head -1 || true)
  debootstrap --variant=minbase --include="$system_packages" bookworm "$SYSTEM_ROOT.tmp" \
    "${mirror:-http://deb.debian.org/debian}" >"$system_dir/debootstrap.log" 2>&1 || {
    tail -20 "$system_dir/debootstrap.log" >&2
    return 1
  }
  # A console that nobody logs in on, and no unit that waits for a network the
  # container shares with the host.
  ln -sf /dev/null "$SYSTEM_ROOT.tmp/etc/systemd/system/console-getty.service"
  echo "$system_packages" >"$SYSTEM_ROOT.tmp/.shoal-root"
  mv "$SYSTEM_ROOT.tmp" "$SYSTEM_ROOT"
}

# system_memory_cgroup NAME: on a host whose memory controller is cgroup v1's,
# the memory cgroup that system NAME runs in, made if need be (a child of this
# script's own), and prints its path; fails where the host's memory controller
# is v2's. nspawn mounts a v1 memory hierarchy read-only in the container, so
# its systemd could make no memory cgroup for a unit: MemoryMax= would hold
# nothing and no unit's memory could be read. This one is mounted writable in
# its place instead, and the system's units get v1 memory cgroups of their own
# under it (on a v2 host nspawn delegates the container a cgroup, and systemd
# uses memory.max there).
system_memory_cgroup() {
  local own
  own=$(awk -F: '$2 == "memory" {print $3}' /proc/self/cgroup)
  [ -n "$own" ] && [ -d /sys/fs/cgroup/memory ] || return 1
  local cg=/sys/fs/cgroup/memory${own%/}/shoal-system-$1
  mkdir -p "$cg" && echo "$cg"
}

# Removes system NAME's memory cgroup (once nothing runs in it), children first.
system_memory_cgroup_remove() {
  local cg
  cg=$(system_memory_cgroup "$1") || return 0
  find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null
  return 0
}

# system_unit_memory UNIT: what the cgroup of UNIT (a unit of the booted system)
# counted of its memory, as "VERSION PEAK MET OOM_KILLS ANON": v2's memory.peak
# and memory.events (max, oom_kill), else v1's max_usage_in_bytes, failcnt and
# oom_control; ANON is what the cgroup's processes hold of their own now
# (RssAnon). Fails when the unit has no memory accounting to read.
system_unit_memory() {
  in_system bash -c "cg=\$(systemctl show -p ControlGroup --value '$1')
    [ -n \"\$cg\" ] || exit 1
    # What the cgroup's processes hold of their own now.
    anon() {
      local a=0 p
      for p in \$(cat \$1/cgroup.procs); do
        a=\$((a + \$(awk '\$1 == \"RssAnon:\" {print \$2 * 1024}' /proc/\$p/status 2>/dev/null || echo 0)))
      done
      echo \$a
    }
    for d in /sys/fs/cgroup\$cg /sys/fs/cgroup/unified\$cg; do
      [ -r \$d/memory.peak ] && [ -r \$d/memory.events ] || continue
      echo v2 \$(cat \$d/memory.peak) \$(awk '\$1 == \"max\" {print \$2}' \$d/memory.events) \$(awk '\$1 == \"oom_kill\" {print \$2}' \$d/memory.events) \$(anon \$d)
      exit
    done
    d=/sys/fs/cgroup/memory\$cg
    [ -r \$d/memory.max_usage_in_bytes ] || exit 1
    echo v1 \$(cat \$d/memory.max_usage_in_bytes) \$(cat \$d/memory.failcnt) \$(awk '\$1 == \"oom_kill\" {print \$2}' \$d/memory.oom_control) \$(anon \$d)"
}

# system_boot NAME: boots (or boots again, keeping what the last boot wrote) the
# system NAME; sets SYSTEM_LEADER (its PID 1, for nsenter) and SYSTEM_PID (the
# nspawn process). Returns once systemd says it is running.
system_boot() {
  local name=$1 run=$system_dir/runs/$1
  mkdir -p "$run/upper" "$run/work" "$run/merged"
  mountpoint -q "$run/merged" ||
    mount -t overlay overlay -o "lowerdir=$SYSTEM_ROOT,upperdir=$run/upper,workdir=$run/work" "$run/merged" || return 1
  # --register=no --keep-unit: the host has no machined and no systemd to make a
  # scope; the host's loopback is shared, so origins started on the host are
  # reachable inside.
  # Memory accounting for the system's units where the host's memory
  # controller is v1's: nspawn in that memory cgroup, shown to the system in
  # place of the read-only hierarchy nspawn would mount.
  local memcg memory=()
  if memcg=$(system_memory_cgroup "$name"); then
    memory=(sh -c 'echo 0 >"$0/cgroup.procs" && exec "$@"' "$memcg")
    memory+=(systemd-nspawn --tmpfs=/sys/fs/cgroup:mode=755 "--bind=$memcg:/sys/fs/cgroup/memory")
  else
    memory=(systemd-nspawn)
  fi
  "${memory[@]}" -D "$run/merged" -b --register=no --keep-unit --bind=/dev/fuse \
    --capability=all --machine="$name" >>"$run/console.log" 2>&1 </dev/null &
  SYSTEM_PID=$!
  SYSTEM_LEADER=
  local i
  for i in $(seq 300); do
    SYSTEM_LEADER=$(pgrep -P "$SYSTEM_PID" -x systemd | head -1)
    [ -n "$SYSTEM_LEADER" ] && break
    kill -0 "$SYSTEM_PID" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$SYSTEM_LEADER" ] || {
    echo "system $name did not boot:" >&2
    tail -20 "$run/console.log" >&2
    return 1
  }
  # PID 1 answers on its bus a moment after it starts; until then systemctl
  # cannot connect at all, and before PID 1 has made /run/systemd/system it
  # says "offline" (not booted with systemd), which is no answer either.
  local state=
  for i in $(seq 300); do
    state=$(in_system systemctl is-system-running 2>/dev/null) && break
    case $state in '' | offline) ;; *) break ;; esac
    sleep 0.1
  done
  timeout 90 nsenter -t "$SYSTEM_LEADER" -a systemctl is-system-running --wait >/dev/null
  state=$(in_system systemctl is-system-running)
  case $state in
    running) ;;
    *)
      echo "system $name booted $state:" >&2
      in_system systemctl --failed --no-pager >&2
      ;;
  esac
}

# Runs a command inside the booted system, as root, in its namespaces.
in_system() { nsenter -t "$SYSTEM_LEADER" -a "$@"; }

# system_path PATH: where PATH of the booted system is on the host.
system_path() { echo "/proc/$SYSTEM_LEADER/root$1"; }

# Halts the system (systemd stops every unit, as at a shutdown) and waits.
system_halt() {
  [ -n "${SYSTEM_PID:-}" ] || return 0
  kill -TERM "$SYSTEM_PID" 2>/dev/null
  local i
  for i in $(seq 300); do
    kill -0 "$SYSTEM_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$SYSTEM_PID" 2>/dev/null
  wait "$SYSTEM_PID" 2>/dev/null
  SYSTEM_PID=
  SYSTEM_LEADER=
}

# system_discard NAME: halts it if booted and removes all it wrote.
system_discard() {
  local run=$system_dir/runs/$1
  system_halt
  mountpoint -q "$run/merged" && umount "$run/merged"
  rm -rf "$run"
  system_memory_cgroup_remove "$1"
}
