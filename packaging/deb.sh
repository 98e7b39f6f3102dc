#!/usr/bin/env bash
# Builds the Debian package from the release binaries already in target/release
# (scripts/test.sh and scripts/demo.sh build them), with dpkg-deb alone: nothing
# else to compile. Usage: packaging/deb.sh [OUT.deb]
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(awk -F'"' '/^version = / { print $2; exit }' Cargo.toml)
arch=$(dpkg --print-architecture)
out=${1:-target/debian/shoal_${version}_${arch}.deb}
bins=(shoal-node shoal-mount shoal-csi shoal)
for b in "${bins[@]}"; do
  [ -x "target/release/$b" ] || {
    echo "deb.sh: target/release/$b is missing: build first (cargo build --release --workspace --bins --examples)" >&2
    exit 1
  }
done

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
put() { install -D -m "$1" "$2" "$stage/$3"; }
# Stripped as Debian ships binaries: the release build keeps line tables for
# backtraces and profiles (about 90 MB a binary), which a package has no use for.
for b in "${bins[@]}"; do
  put 755 "target/release/$b" "usr/bin/$b"
  strip --remove-section=.comment --remove-section=.note --strip-unneeded "$stage/usr/bin/$b"
done
put 755 packaging/mount.fuse.shoal sbin/mount.fuse.shoal
conffiles=()
for c in node mount cluster-dns gateway; do
  put 640 "config/$c.toml" "etc/shoal/$c.toml"
  conffiles+=("/etc/shoal/$c.toml")
done
put 644 packaging/systemd/shoal-node.service lib/systemd/system/shoal-node.service
put 644 packaging/debian/shoal-node.logrotate etc/logrotate.d/shoal-node
conffiles+=("/etc/logrotate.d/shoal-node")
put 644 packaging/systemd/shoal-mount@.service lib/systemd/system/shoal-mount@.service
put 644 packaging/monitoring/alerts.yml usr/share/doc/shoal/monitoring/alerts.yml
put 644 packaging/monitoring/grafana-dashboard.json usr/share/doc/shoal/monitoring/grafana-dashboard.json
put 644 README.md usr/share/doc/shoal/README.md
# The book's pages, as Markdown: the units' Documentation= names them.
for page in docs/src/*.md; do
  put 644 "$page" "usr/share/doc/shoal/book/$(basename "$page")"
done
put 644 packaging/debian/copyright usr/share/doc/shoal/copyright
# A native package's changelog, in Debian's format, compressed as policy wants.
mkdir -p "$stage/usr/share/doc/shoal"
cat >"$stage/usr/share/doc/shoal/changelog" <<CHANGELOG
shoal ($version) unstable; urgency=medium

  * Built from the shoal source tree at version $version.

 -- shoal developers <maintainers@shoal.invalid>  $(date -R -d "@$(git log -1 --format=%ct 2>/dev/null || date +%s)")
CHANGELOG
gzip -9n "$stage/usr/share/doc/shoal/changelog"

# The C library the binaries need: the newest symbol version they link against.
glibc=$(for b in "${bins[@]}"; do objdump -T "target/release/$b"; done |
  grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)

mkdir -p "$stage/DEBIAN"
printf '%s\n' "${conffiles[@]}" >"$stage/DEBIAN/conffiles"
for s in postinst postrm; do
  sed '/#DEBHELPER#/d' "packaging/debian/$s" >"$stage/DEBIAN/$s"
  chmod 755 "$stage/DEBIAN/$s"
done
(cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | xargs -0 md5sum) >"$stage/DEBIAN/md5sums"
cat >"$stage/DEBIAN/control" <<CONTROL
Package: shoal
Version: $version
Architecture: $arch
Maintainer: shoal developers <maintainers@shoal.invalid>
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Depends: fuse3, adduser, libc6 (>= $glibc)
Section: net
Priority: optional
Description: Mount an S3 bucket read-only and serve its reads from a cluster of cache nodes
 shoal mounts an S3 bucket as a read-only directory and serves its reads from a
 cluster of cache nodes. This package installs shoal-node (the cache node),
 shoal-mount (the FUSE daemon, with a mount.fuse.shoal helper for fstab),
 shoal-csi (the Kubernetes CSI node plugin) and shoal (the admin CLI),
 example configs in /etc/shoal and systemd units.
CONTROL
mkdir -p "$(dirname "$out")"
dpkg-deb --root-owner-group --build "$stage" "$out" >/dev/null
echo "$out"
