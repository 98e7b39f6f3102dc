#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine, then runs formatting,
# the book's build, lint and the whole test suite. Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v fusermount3 >/dev/null 2>&1 || need_apt+=(fuse3)
# The chaos test puts nodes in network namespaces (ip netns, veth).
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
# The access-log test rotates the log with logrotate itself.
command -v logrotate >/dev/null 2>&1 || need_apt+=(logrotate)
# The client matrix runs real S3 clients through a node; mountpoint-s3 needs libfuse2.
command -v rclone >/dev/null 2>&1 || need_apt+=(rclone)
command -v s3fs >/dev/null 2>&1 || need_apt+=(s3fs)
# packaging/system-test.sh boots a Debian root of its own under systemd-nspawn.
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
command -v systemd-nspawn >/dev/null 2>&1 || need_apt+=(systemd-container)
# The container image is built and unpacked without a registry or a runtime
# (buildah, umoci); the static shoal-mount needs musl's C compiler; the
# Kubernetes installs are rendered by kubectl (Debian's kubernetes-client where
# the machine has none).
command -v buildah >/dev/null 2>&1 || need_apt+=(buildah)
command -v umoci >/dev/null 2>&1 || need_apt+=(umoci)
command -v musl-gcc >/dev/null 2>&1 || need_apt+=(musl-tools)
command -v kubectl >/dev/null 2>&1 || need_apt+=(kubernetes-client)
[ -e /lib/x86_64-linux-gnu/libfuse.so.2 ] || [ -e /usr/lib/x86_64-linux-gnu/libfuse.so.2 ] || need_apt+=(libfuse2)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "== installing Debian packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
python3 -c 'import boto3' 2>/dev/null || { echo "== installing boto3"; python3 -m pip install --quiet boto3; }
# moto's S3 server is the conformance suite's independent origin; the aws CLI is
# one of the clients it runs.
python3 -c 'import moto.server, flask' 2>/dev/null || { echo "== installing moto[server]"; python3 -m pip install --quiet 'moto[server]'; }
python3 -c 'import awscli' 2>/dev/null || { echo "== installing the aws CLI"; python3 -m pip install --quiet awscli; }
# grpc-python: a CSI client that names the plugin's socket as its :authority.
python3 -c 'import grpc' 2>/dev/null || { echo "== installing grpcio"; python3 -m pip install --quiet grpcio; }
# DuckDB and pyarrow: the mount's suite queries Parquet files through a mount.
python3 -c 'import duckdb, pyarrow' 2>/dev/null || { echo "== installing duckdb and pyarrow"; python3 -m pip install --quiet duckdb pyarrow; }
# pytest and what ceph/s3-tests imports: its write-side tests, at moto and through a gateway.
python3 -c 'import pytest, munch, isodate, lxml, pytz' 2>/dev/null || { echo "== installing pytest and s3-tests' packages"; python3 -m pip install --quiet pytest munch isodate lxml pytz; }
# (The Python package's build and test requirements go into environments of
# their own: python/test-wheel.sh.)
# mkdocs builds the book (docs/); 1.6 is the first that checks anchors.
python3 -c 'import sys, mkdocs; sys.exit(tuple(map(int, mkdocs.__version__.split(".")[:2])) < (1, 6))' 2>/dev/null || { echo "== installing mkdocs"; python3 -m pip install --quiet 'mkdocs>=1.6,<2'; }
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl || rustup target add x86_64-unknown-linux-musl

# One build per run: incremental state would only double the disk a clean
# machine needs.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
df -h . | awk 'NR==2 {print "== disk free here: " $4}'
phase() { echo "== $1 (at ${SECONDS}s)"; }

# The system test's root (debootstrap: mostly waiting on the mirror) is built
# while the compiler works; packaging/system-test.sh waits for it.
if [ "$(id -u)" -eq 0 ]; then
  mkdir -p target/system
  # (Not under this script's `set -e`: the build reports its own failure.)
  (set +e; source packaging/system/lib.sh && system_root) >target/system/root-build.log 2>&1 &
  root_build=$!
fi

# shoal-mount statically linked (musl), for the CSI plugin's host units and the
# image, which packaging/test.sh checks: built from the start at the lowest
# priority, in a target directory of its own (no lock shared with the builds
# and tests below), so that it takes the CPU the other phases leave idle
# (a build's serial stretches, tests waiting on I/O).
mkdir -p target
nice -n 19 env CARGO_TARGET_DIR=target/static cargo build --profile static --locked \
  --target x86_64-unknown-linux-musl -p shoal-mount --bin shoal-mount >target/static-build.log 2>&1 &
static_build=$!
static_start=$SECONDS
trap 'kill "$static_build" 2>/dev/null || true' EXIT

phase "cargo fmt --check"
cargo fmt --all -- --check
# The book: --strict makes a link to a missing page or anchor fail the build;
# check_links.py then checks the links into it from the rest of the repository
# (the README, --help texts, comments). Its configuration reference is checked
# against the config types by the library's tests (config_reference).
phase "the book (docs/): mkdocs build --strict, then the links into it"
# (Never --quiet: mkdocs then drops the warnings --strict counts, and passes.)
python3 -m mkdocs build --strict -f docs/mkdocs.yml
python3 docs/check_links.py
# One release build serves the tests, the Debian package, the demo and the
# benches: every dependency is built with the same features and profile as in
# scripts/demo.sh's build and packaging/test.sh's, so what one built the others
# reuse.
phase "build (release: libraries, binaries, examples, tests)"
cargo test --release --workspace --locked --no-run
# Clippy checks in the same profile, so the build's proc-macros and build
# scripts serve it too.
phase "cargo clippy"
cargo clippy --release --workspace --all-targets --locked -- -D warnings
phase "cargo test"
cargo test --release --workspace --locked
# The static build ends here at the latest: nothing may run beside the next.
wait "$static_build" || { cat target/static-build.log; exit 1; }
echo "== static shoal-mount (started at ${static_start}s): $(grep Finished target/static-build.log)"
# A test that compares one key's latencies with another key hammering beside it,
# on its own so that no other test's load is in its numbers.
phase "per-key limits, alone"
# (--workspace: the build above serves it; one package alone would build anew.)
cargo test --release --workspace --locked -- --ignored a_key_over_its_rate
# The Python package as a user gets it: a wheel (pip wheel ./python, reusing
# the release build above: its crate is a workspace member), installed into a
# fresh venv with no cargo on PATH, then its tests against that install:
# shoal:// and the datasets over the test origin and real nodes.
phase "Python package: its wheel, installed into a fresh venv without cargo, then its tests"
# The binaries its tests start (the test origin among them), built as
# packaging/test.sh builds them below: that build is then already done.
cargo build --release --locked --quiet --workspace --bins --examples
python/test-wheel.sh
# mountpoint-s3 cannot be installed from a registry: its leg of the client
# matrix runs where a build of it is at hand, and says so where none is.
mount_s3=${SHOAL_MOUNT_S3:-../shared/peers/mount-s3}
if [ -x "$mount_s3" ]; then
  phase "mountpoint-s3 leg of the client matrix ($mount_s3)"
  SHOAL_MOUNT_S3=$(realpath "$mount_s3") cargo test --release --workspace --locked -- --ignored mountpoint_s3
else
  echo "== mountpoint-s3 leg of the client matrix NOT run: no build at $mount_s3 (set SHOAL_MOUNT_S3)"
fi
# ceph/s3-tests is fetched by hand (no registry ships it): its leg runs where a
# checkout is at hand, and says so where none is.
s3_tests=${SHOAL_S3_TESTS:-target/s3-tests}
if [ -f "$s3_tests/s3tests/functional/test_s3.py" ]; then
  phase "ceph/s3-tests write-side selection, at moto and through a gateway ($s3_tests)"
  SHOAL_S3_TESTS=$(realpath "$s3_tests") cargo test --release --workspace --locked -- --ignored s3_tests_pass_through
else
  echo "== ceph/s3-tests leg NOT run: no checkout at $s3_tests (set SHOAL_S3_TESTS)"
fi
du -sh target 2>/dev/null | awk '{print "== build output so far: " $1}'
phase "packaging (Debian package, systemd units, fstab mount, manifests)"
if [ "$(id -u)" -eq 0 ]; then
  wait "$root_build" || { echo "building the system test's root failed:"; tail -20 target/system/root-build.log; }
  packaging/test.sh
else
  echo "packaging/test.sh needs root (dpkg -i, mount): run it with sudo" >&2
  exit 1
fi
phase "done"
