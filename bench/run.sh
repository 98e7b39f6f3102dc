#!/usr/bin/env bash
# Runs every benchmark in bench/ and prints their tables one after another.
# Each benchmark measures its baseline in the same run; read the ratios.
set -uo pipefail
cd "$(dirname "$0")"
status=0
for b in *.sh; do
  case "$b" in run.sh|lib.sh) continue ;; esac
  echo "=== $b"
  if ! ./"$b" 2>&1 | grep -v '^warm-up read failed' ; then status=1; fi
  echo
done
exit $status
