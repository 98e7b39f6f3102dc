#!/usr/bin/env bash
# The Python package as a user installs it: a wheel made by a standard PEP 517
# build (pip wheel ./python), its platform tag checked with auditwheel (no
# newer than manylinux_2_28), the source package checked to stand on its own,
# the wheel installed into a fresh venv whose PATH has no cargo, and
# python/tests run against that install. The tests start the
# workspace's release binaries (shoal-node, the test origin): build them first
# (cargo build --release --workspace --bins --examples).
# Usage: python/test-wheel.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
wheels=target/py-dist
venv=target/py-venv
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# maturin and zig come from PyPI into the build's own environment; cargo
# builds into the workspace's target/, reusing what the workspace build made.
rm -rf "$wheels"
t=$SECONDS
python3 -m pip wheel --quiet --no-deps --wheel-dir "$wheels" ./python
whl=$(echo "$wheels"/shoal-*.whl)
echo "== wheel built in $((SECONDS - t)) s: $(basename "$whl"), $(du -k "$whl" | cut -f1) KiB"

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
py() { PATH=$clean_path "$venv/bin/python" "$@"; }

# auditwheel reads which glibc symbols the module needs.
py -m pip install --quiet auditwheel
shown=$(py -m auditwheel show "$whl" | tr -s ' \n' ' ')
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

# The source package: maturin puts in it the crates the module needs (the
# library, workspace-hack, and what they name as path dependencies) and the
# workspace's lock file, under a workspace of those alone. cargo must resolve
# that workspace on its own, to the versions the lock file pins (it drops the
# packages only the members left out use); a whole build from it (pip install
# shoal-*.tar.gz, which needs cargo) takes minutes, so not here.
t=$SECONDS
py -m pip install --quiet build
sdist_dir=$(mktemp -d)
trap 'rm -rf "$sdist_dir"' EXIT
"$venv/bin/python" -m build --sdist --outdir "$sdist_dir" python/ >"$sdist_dir/log" 2>&1 ||
  { cat "$sdist_dir/log" >&2; exit 1; }
sdist=$(echo "$sdist_dir"/shoal-*.tar.gz)
tar -xzf "$sdist" -C "$sdist_dir"
unpacked=$sdist_dir/$(basename "$sdist" .tar.gz)
for f in pyproject.toml backend/shoal_build.py shoal/fs.py python/Cargo.toml Cargo.lock; do
  [ -f "$unpacked/$f" ] || { echo "the source package has no $f" >&2; exit 1; }
done
cp "$unpacked/Cargo.lock" "$sdist_dir/Cargo.lock.packed"
cargo metadata --offline --format-version 1 --manifest-path "$unpacked/python/Cargo.toml" >/dev/null
py - "$sdist_dir/Cargo.lock.packed" "$unpacked/Cargo.lock" <<'PY'
import sys, tomllib
packed, resolved = ({(p["name"], p["version"]) for p in tomllib.load(open(f, "rb"))["package"]} for f in sys.argv[1:])
if resolved - packed:
    sys.exit(f"the source package resolves to versions its lock file does not pin: {sorted(resolved - packed)}")
print(f"== the source package's workspace resolves to {len(resolved)} of the {len(packed)} pinned packages")
PY
echo "== source package $(basename "$sdist") ($(du -k "$sdist" | cut -f1) KiB) resolves on its own, in $((SECONDS - t)) s"

t=$SECONDS
# The wheel and its test extra (pyproject.toml): pytest and the readers the
# tests read through, from PyPI (pip's cache keeps them between runs), at the
# versions in test-constraints.txt.
py -m pip install --quiet -c python/test-constraints.txt "$whl[test]"
echo "== fresh venv with the wheel and its test extra in $((SECONDS - t)) s"
# The tests import the installed package, not the checkout's python/shoal
# (pytest puts python/tests first on sys.path, as here).
where=$(py -c '
import sys; sys.path.insert(0, "python/tests")
import shoal, shoal._shoal
print(shoal.__file__, shoal._shoal.__file__)' 2>&1) ||
  { echo "the tests cannot import the installed shoal: $where" >&2; exit 1; }
case "$where" in
  "$root/$venv/"*" $root/$venv/"*) echo "== the tests import shoal from the venv: $where" ;;
  *) echo "the tests would import shoal from $where, not from $venv" >&2; exit 1 ;;
esac
t=$SECONDS
py -m pytest -q python/tests "$@"
echo "== python/tests against the installed wheel in $((SECONDS - t)) s"
