#!/usr/bin/env bash
# The Python package as a user installs it: a wheel made by a standard PEP 517
# build (pip wheel ./python), its platform tag checked with auditwheel (no
# newer than manylinux_2_28), installed into a fresh venv whose PATH has no
# cargo, and python/tests run against that install. The tests start the
# workspace's release binaries (shoal-node, the test origin): build them first
# (cargo build --release --workspace --bins --examples).
# Usage: python/test-wheel.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
wheels=target/wheels
venv=target/py-venv
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# maturin and zig come from PyPI into the build's own environment; cargo
# builds into the workspace's target/, reusing what the workspace build made.
rm -rf "$wheels"
t=$SECONDS
python3 -m pip wheel --quiet --no-deps --wheel-dir "$wheels" ./python
whl=$(echo "$wheels"/shoal-*.whl)
echo "== wheel built in $((SECONDS - t)) s: $(basename "$whl"), $(du -k "$whl" | cut -f1) KiB"

python3 -c 'import auditwheel' 2>/dev/null || python3 -m pip install --quiet auditwheel
shown=$(python3 -m auditwheel show "$whl" | tr -s ' \n' ' ')
echo "== auditwheel show: $shown"
# The glibc the module's symbols need, as auditwheel reads them: 2.28 at most.
glibc_minor=$(sed -n 's/.*platform tag: "manylinux_2_\([0-9]*\)_[a-z0-9_]*".*/\1/p' <<<"$shown")
if [ -z "$glibc_minor" ] || [ "$glibc_minor" -gt 28 ]; then
  echo "the wheel needs a glibc newer than 2.28 (auditwheel: manylinux_2_${glibc_minor:-?})" >&2
  exit 1
fi
case "$(basename "$whl")" in
  shoal-*-cp311-abi3-manylinux_2_28_"$(uname -m)".whl) ;;
  *) echo "the wheel is not tagged cp311-abi3-manylinux_2_28_$(uname -m): $(basename "$whl")" >&2; exit 1 ;;
esac

# A fresh venv, and a PATH without cargo or rustc: the wheel must need neither.
rm -rf "$venv"
python3 -m venv "$venv"
clean_path=$root/$venv/bin
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do
  [ -n "$d" ] && [ ! -e "$d/cargo" ] && [ ! -e "$d/rustc" ] && clean_path+=":$d"
done
if PATH=$clean_path command -v cargo >/dev/null || PATH=$clean_path command -v rustc >/dev/null; then
  echo "cargo is still on the test PATH ($clean_path)" >&2
  exit 1
fi
t=$SECONDS
# The wheel and its test extra (pyproject.toml): pytest and the readers the
# tests read through, from PyPI (pip's cache keeps them between runs).
PATH=$clean_path "$venv/bin/python" -m pip install --quiet "$whl[test]"
echo "== fresh venv with the wheel and its test extra in $((SECONDS - t)) s"
# The tests import the installed package, not the checkout's python/shoal
# (pytest puts python/tests first on sys.path, as here).
where=$(PATH=$clean_path "$venv/bin/python" -c '
import sys; sys.path.insert(0, "python/tests")
import shoal, shoal._shoal
print(shoal.__file__, shoal._shoal.__file__)')
case "$where" in
  "$root/$venv/"*" $root/$venv/"*) echo "== the tests import shoal from the venv: $where" ;;
  *) echo "the tests would import shoal from $where, not from $venv" >&2; exit 1 ;;
esac
t=$SECONDS
PATH=$clean_path "$venv/bin/python" -m pytest -q python/tests "$@"
echo "== python/tests against the installed wheel in $((SECONDS - t)) s"
