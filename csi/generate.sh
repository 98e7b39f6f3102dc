#!/usr/bin/env bash
# Regenerates src/proto/csi.v1.rs from proto/csi.proto (the CSI spec's own file,
# vendored). The build needs neither protoc nor this script: the generated code is
# checked in. Needs protoc (Debian: protobuf-compiler) and the network once, for
# tonic-prost-build. Usage: csi/generate.sh
set -euo pipefail
cd "$(dirname "$0")"
command -v protoc >/dev/null || { apt-get update -qq && apt-get install -y -qq protobuf-compiler >/dev/null; }
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
mkdir -p "$gen/src"
cat >"$gen/Cargo.toml" <<'TOML'
[package]
name = "csi-generate"
version = "0.0.0"
edition = "2021"
publish = false
[workspace]
[dependencies]
tonic-prost-build = "=0.14.9"
TOML
cat >"$gen/src/main.rs" <<'RS'
fn main() {
    let (proto, out) = (std::env::args().nth(1).unwrap(), std::env::args().nth(2).unwrap());
    let dir = std::path::Path::new(&proto).parent().unwrap().to_path_buf();
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .out_dir(out)
        .compile_protos(&[&proto], &[&dir])
        .unwrap();
}
RS
cargo run -q --manifest-path "$gen/Cargo.toml" -- "$PWD/proto/csi.proto" "$PWD/src/proto"
echo "src/proto/csi.v1.rs regenerated"
