# Readers under a mount for packaging/system/units.sh, sourced by it after lib.sh:
# four of them reading every file through the mount in the booted system while a
# handover, a restart or a reload happens under them, and what they saw, a stalled
# reader or a slow call counted as a failed one. Uses the test's `files` (paths under
# its seed, copied to /root/seed in the system) and keeps its children's pids in
# `readers`, so that the test's cleanup can end them.

# A reader as an operator's job would be one: reads each file through the mount
# with O_DIRECT (so every read reaches the mount's server, none is the page
# cache's) and compares it with the origin's copy, until told to stop; then
# writes "calls failed slowest_ms". OUT.calls counts its calls as it goes.
readers_install() {
  cat >"$(system_path /root)/reader.sh" <<'READER'
#!/bin/bash
set -o pipefail
stop=$1 out=$2 dir=$3; shift 3
calls=0 failed=0 slowest=0
while [ ! -e "$stop" ]; do
  for f in "$@"; do
    t0=$(date +%s%N)
    if ! dd if="$dir/$f" iflag=direct bs=1M status=none 2>>"$out.err" | cmp -s - "/root/seed/$f"; then
      failed=$((failed + 1))
      echo "$(date +%T.%N) $f: read failed or differed" >>"$out.err"
    fi
    ms=$((($(date +%s%N) - t0) / 1000000))
    calls=$((calls + 1))
    echo "$calls" >"$out.calls"
    [ "$ms" -gt "$slowest" ] && slowest=$ms
  done
done
echo "$calls $failed $slowest" >"$out"
READER
  chmod +x "$(system_path /root)/reader.sh"
}

# The longest a reader's call may take (a read of a whole file, held by a
# handover or a restart of the server under it), in ms: a read that waits longer
# has stalled, however it ends.
stall_max_ms=${SHOAL_READ_STALL_MAX_MS:-10000}
# readers_start DIR: four readers on the files under DIR; readers_stop prints
# "calls failed slowest enotconn" over all four (not in a subshell: it waits
# for this shell's children), a reader that made no progress or a call slower
# than stall_max_ms counted as a failed call.
readers_start() {
  rm -f "$(system_path /tmp)"/reader-*
  readers=()
  readers_stalled=0
  local i
  for i in 1 2 3 4; do
    in_system /root/reader.sh /tmp/reader-stop "/tmp/reader-$i" "$1" "${files[@]}" &
    readers+=($!)
  done
  readers_read 1
}
# readers_read N: returns once every reader has made N more calls (within 30 s),
# so that what is measured happens with reads going on, before and after it;
# fails, and marks the readers stalled, if one has not by then.
readers_read() {
  local i want=() c
  for i in 1 2 3 4; do want+=($(($(reader_calls "$i") + $1))); done
  for _ in $(seq 600); do
    c=0
    for i in 1 2 3 4; do
      [ "$(reader_calls "$i")" -ge "${want[$((i - 1))]}" ] && c=$((c + 1))
    done
    [ "$c" = 4 ] && return 0
    sleep 0.05
  done
  echo "     FAIL: $((4 - c)) of the readers made no progress in 30 s" >&2
  readers_stalled=$((readers_stalled + 1))
  return 1
}
# reader_calls I: reader I's calls so far (its file is empty for a moment as it
# is rewritten).
reader_calls() {
  local c
  c=$(cat "$(system_path /tmp)/reader-$1.calls" 2>/dev/null)
  echo "${c:-0}"
}
readers_stop() {
  readers_read 1
  touch "$(system_path /tmp)/reader-stop"
  # A reader ends its pass over the files first: waited for as long as that
  # may take, one stall per file at most, and then counted as stalled rather
  # than waited on for ever.
  local p grace=$((${#files[@]} * stall_max_ms / 1000 + 5))
  local deadline=$((SECONDS + grace))
  for p in "${readers[@]}"; do
    while kill -0 "$p" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
    if kill -0 "$p" 2>/dev/null; then
      echo "     FAIL: a reader was still reading $grace s after it was told to stop" >&2
      kill "$p" 2>/dev/null
      readers_stalled=$((readers_stalled + 1))
    fi
    wait "$p" 2>/dev/null
  done
  readers=()
  local dir calls=0 fails=0 slowest=0 c f s
  dir=$(system_path /tmp)
  for i in 1 2 3 4; do
    read -r c f s <"$dir/reader-$i" || { c=0; f=1; s=0; }
    calls=$((calls + c)); fails=$((fails + f))
    [ "$s" -gt "$slowest" ] && slowest=$s
  done
  if [ "$readers_stalled" -gt 0 ]; then
    fails=$((fails + readers_stalled))
  fi
  if [ "$slowest" -gt "$stall_max_ms" ]; then
    echo "     FAIL: a read took $slowest ms, more than the $stall_max_ms ms a reader may stall" >&2
    fails=$((fails + 1))
  fi
  echo "$calls $fails $slowest $(cat "$dir"/reader-*.err 2>/dev/null | grep -c 'not connected')"
  cat "$dir"/reader-*.err 2>/dev/null | head -5 >&2
}
