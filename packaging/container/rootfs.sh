#!/usr/bin/env bash
# Assembles the container image's root: shoal's four programs and nothing to
# build or to log in with. No shell, no package manager, no compiler.
#
#   packaging/container/rootfs.sh BINDIR MOUNTBIN SYSROOT OUT
#
# BINDIR holds shoal-node, shoal-csi and shoal (built against SYSROOT's glibc);
# MOUNTBIN is the statically linked shoal-mount, which the CSI plugin copies to
# hosts of any libc. From SYSROOT (a Debian root: the build stage's own / in
# the Dockerfile, the system tests' debootstrapped root in packaging/
# container/build.sh) come the shared libraries those programs load, the CA
# bundle, and the plugin's systemd-run and journalctl (it starts each mount as
# a unit of the host's systemd). The root has users root and shoal (999), whom
# the image runs as.
set -euo pipefail
[ $# -eq 4 ] || { echo "usage: rootfs.sh BINDIR MOUNTBIN SYSROOT OUT" >&2; exit 2; }
bindir=$1 mountbin=$2 sysroot=${3%/} out=$4
cd "$(dirname "$0")/../.."

for f in "$bindir/shoal-node" "$bindir/shoal-csi" "$bindir/shoal" "$mountbin" \
  "$sysroot/usr/bin/systemd-run" "$sysroot/usr/bin/journalctl" "$sysroot/etc/ssl/certs/ca-certificates.crt"; do
  [ -f "$f" ] || { echo "rootfs.sh: $f is missing" >&2; exit 1; }
done
if readelf -l "$mountbin" | grep -q 'Requesting program interpreter'; then
  echo "rootfs.sh: $mountbin is linked dynamically: the hosts' units need it static" >&2
  exit 1
fi

rm -rf "$out"
# (dev, proc, sys and run: where a runtime mounts its own; root: HOME of uid 0.)
mkdir -p "$out"/{usr/bin,usr/lib/x86_64-linux-gnu,usr/lib64,etc/ssl/certs,etc/shoal,tmp,var/cache/shoal,dev,proc,sys,run,root}
# Debian's merged /usr: the loader's path in every binary is /lib64/...
ln -s usr/lib "$out/lib"
ln -s usr/lib64 "$out/lib64"
ln -s usr/bin "$out/bin"
chmod 1777 "$out/tmp"

# Stripped as the Debian package ships them (deb.sh).
for b in shoal-node shoal-csi shoal; do
  install -m 0755 "$bindir/$b" "$out/usr/bin/$b"
done
install -m 0755 "$mountbin" "$out/usr/bin/shoal-mount"
for b in shoal-node shoal-csi shoal shoal-mount; do
  strip --remove-section=.comment --remove-section=.note --strip-unneeded "$out/usr/bin/$b"
done
install -m 0755 "$sysroot/usr/bin/systemd-run" "$sysroot/usr/bin/journalctl" "$out/usr/bin/"

# lib NAME: where SYSROOT keeps the library NAME (its multiarch directories, and
# systemd's private one, which its programs' RUNPATH names).
lib() {
  local d
  for d in usr/lib/x86_64-linux-gnu lib/x86_64-linux-gnu usr/lib/x86_64-linux-gnu/systemd; do
    [ -e "$sysroot/$d/$1" ] && { echo "$d/$1"; return; }
  done
  echo "rootfs.sh: no $1 under $sysroot" >&2
  return 1
}
# Every library the programs need, and what those need, copied to the same path
# (the dynamic loader's own name among them).
declare -A seen=()
queue=("$out"/usr/bin/*)
while [ ${#queue[@]} -gt 0 ]; do
  f=${queue[0]}
  queue=("${queue[@]:1}")
  for need in $(readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [ -n "${seen[$need]:-}" ] && continue
    seen[$need]=1
    rel=$(lib "$need")
    mkdir -p "$out/$(dirname "${rel#/}")"
    cp -L "$sysroot/$rel" "$out/${rel/#lib\//usr/lib/}"
    queue+=("$out/${rel/#lib\//usr/lib/}")
  done
done
cp -L "$sysroot/lib64/ld-linux-x86-64.so.2" "$out/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
ln -s ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$out/usr/lib64/ld-linux-x86-64.so.2"

cp -L "$sysroot/etc/ssl/certs/ca-certificates.crt" "$out/etc/ssl/certs/"
# The example configs, as the Debian package installs them: the image's
# default command reads node.toml.
for c in node mount cluster-dns gateway; do install -m 0644 "config/$c.toml" "$out/etc/shoal/$c.toml"; done
cat >"$out/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/usr/sbin/nologin
shoal:x:999:999:shoal:/var/cache/shoal:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
PASSWD
cat >"$out/etc/group" <<'GROUP'
root:x:0:
shoal:x:999:
nogroup:x:65534:
GROUP
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$out/etc/nsswitch.conf"
chown 999:999 "$out/var/cache/shoal"
echo "$out: $(du -sh --apparent-size "$out" | cut -f1), $(find "$out" -type f | wc -l) files"
