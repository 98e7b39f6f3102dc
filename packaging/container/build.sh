#!/usr/bin/env bash
# Builds the container image without a registry or a container runtime: the
# root from packaging/container/rootfs.sh, committed by buildah as one layer
# onto scratch, and written as an OCI layout (and, with --archive, a
# docker-archive file that `docker load`, `kind load image-archive` and
# `ctr -n k8s.io images import` take). The Dockerfile beside this file builds
# the same image where a registry is at hand.
#
#   packaging/container/build.sh [--archive] [OUTDIR]       (default target/image)
#
# Uses the release build in target/release (shoal-node, shoal-csi, shoal), the
# static shoal-mount of target/static/x86_64-unknown-linux-musl/static (a
# target directory of its own; built here if missing: rustup target add
# x86_64-unknown-linux-musl; Debian's musl-tools),
# and as the system's root SHOAL_SYSROOT, by default the system tests' Debian
# root (packaging/system/lib.sh builds it). Prints the image's reference, size
# and user.
set -euo pipefail
cd "$(dirname "$0")/../.."
archive=
[ "${1:-}" = --archive ] && { archive=1; shift; }
out=$(realpath -m "${1:-target/image}")
version=$(awk -F'"' '/^version = / { print $2; exit }' Cargo.toml)
ref=shoal:$version
musl=target/static/x86_64-unknown-linux-musl/static/shoal-mount

for b in shoal-node shoal-csi shoal; do
  [ -x "target/release/$b" ] || { echo "build.sh: target/release/$b is missing: cargo build --release --workspace --bins" >&2; exit 1; }
done
[ -x "$musl" ] || CARGO_TARGET_DIR=target/static cargo build --profile static --locked --target x86_64-unknown-linux-musl -p shoal-mount --bin shoal-mount
if [ -z "${SHOAL_SYSROOT:-}" ]; then
  # shellcheck source=packaging/system/lib.sh
  source packaging/system/lib.sh
  system_root
  SHOAL_SYSROOT=$SYSTEM_ROOT
fi

mkdir -p "$out"
packaging/container/rootfs.sh target/release "$musl" "$SHOAL_SYSROOT" "$out/rootfs"

# buildah's storage of this build alone (vfs: no overlay mounts needed).
bh() { buildah --root "$out/storage" --runroot "$out/run" --storage-driver vfs "$@"; }
c=$(bh from --quiet scratch)
trap 'bh rm "$c" >/dev/null 2>&1 || true' EXIT
bh copy --quiet "$c" "$out/rootfs" / >/dev/null
# What the manifests run: the node as the image's user, the CSI plugin (which
# mounts and starts host units) as root by its securityContext. No entrypoint:
# a pod's args are the whole command.
bh config --entrypoint '[]' --cmd '["shoal-node", "--config", "/etc/shoal/node.toml"]' \
  --user 999:999 --port 9100 --workingdir / --env PATH=/usr/bin \
  --label org.opencontainers.image.title=shoal \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)" "$c"
bh commit --quiet --rm "$c" "$ref" >/dev/null
trap - EXIT
rm -rf "$out/oci"
bh push --quiet "$ref" "oci:$out/oci:$ref" >/dev/null
if [ -n "$archive" ]; then
  rm -f "$out/shoal-$version.tar"
  bh push --quiet "$ref" "docker-archive:$out/shoal-$version.tar:$ref" >/dev/null
  echo "archive: $out/shoal-$version.tar"
fi
bh rmi --quiet "$ref" >/dev/null 2>&1 || true
layers=$(python3 -c '
import json, sys
d = sys.argv[1]
idx = json.load(open(d + "/index.json"))
m = json.load(open(d + "/blobs/" + idx["manifests"][0]["digest"].replace(":", "/")))
cfg = json.load(open(d + "/blobs/" + m["config"]["digest"].replace(":", "/")))
print(sum(l["size"] for l in m["layers"]), cfg["config"].get("User", ""))' "$out/oci")
echo "image $ref: OCI layout $out/oci, $((${layers% *} >> 20)) MiB compressed, $(du -sm "$out/rootfs" | cut -f1) MiB unpacked, user ${layers#* }"
