#!/usr/bin/env bash
# The package in a booted system, checked as an operator would with systemctl: the
# node's and the mount's units (packaging/system/units.sh) and the CSI driver as its
# DaemonSet runs it (packaging/system/csi.sh); and the image's CSI plugin container
# on a system without the package (packaging/system/image.sh, from the image
# packaging/container/test.sh unpacked), each in a Debian system of its own
# with systemd as PID 1 (packaging/system/lib.sh). Run as root; called by
# packaging/test.sh with the package it built: packaging/system-test.sh SHOAL.deb.
# Prints "system: N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
deb=${1:?usage: packaging/system-test.sh SHOAL.deb}
[ -f "$deb" ] || { echo "system-test.sh: no package at $deb" >&2; exit 2; }
deb=$(realpath "$deb")
source packaging/system/lib.sh

echo "== a booted system"
start=$(date +%s)
system_root || { echo "FAIL building the system's root (debootstrap)"; echo "system: 0 passed, 1 failed"; exit 1; }
echo "ok   root ready in $(($(date +%s) - start)) s ($SYSTEM_ROOT)"

passed=1; failed=0
for part in units csi image; do
  out=$(mktemp)
  packaging/system/$part.sh "$deb" 2>&1 | tee "$out"
  p=$(sed -n 's/^[a-z-]*: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$out" | tail -1)
  f=$(sed -n 's/^[a-z-]*: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$out" | tail -1)
  if [ -z "$p" ]; then
    echo "FAIL packaging/system/$part.sh ended without its summary"
    f=$((${f:-0} + 1)); p=0
  fi
  passed=$((passed + p)); failed=$((failed + f))
  rm -f "$out"
done
echo "system: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
