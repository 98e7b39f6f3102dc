//! The mount's own test harness, on the shared test kit (the real origin, real
//! `shoal-node` processes, the real `shoal-mount` binary).
#![allow(dead_code)]

use std::path::Path;

use bytes::Bytes;

pub use shoal_testkit::*;

pub const MOUNT: &str = env!("CARGO_BIN_EXE_shoal-mount");

/// A node process with a 256 MiB RAM tier.
pub fn start_node(o: &Origin, dir: &Path, name: &str) -> NodeProcess {
    start_node_with(o, dir, name, "[cache]\nram_size = \"256MiB\"\n")
}

/// A node process with `extra` (its `[cache]` section, say) in its config.
pub fn start_node_with(o: &Origin, dir: &Path, name: &str, extra: &str) -> NodeProcess {
    NodeProcess::start(dir, name, &node_toml(o, "", extra))
}

/// Puts `files` in the origin under `prefix` and in `local` (a mirror to compare with).
pub fn seed(o: &Origin, prefix: &str, local: &Path, files: &[(&str, Bytes)]) {
    for (k, b) in files {
        o.put(BUCKET, &format!("{prefix}{k}"), b.clone());
        let p = local.join(k);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b).unwrap();
    }
}
