//! Replays every input kept in `fuzz/corpus/<target>/` (seeds, what the fuzzers
//! found interesting, and every crash they ever found, kept as regressions) through
//! the same entry points the fuzz targets call. A panic is a failure.

use std::path::PathBuf;

#[path = "../../../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod entries;

fn replay(target: &str, run: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut n = 0;
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        // A fuzzer working on the corpus may remove files under us.
        let data = match std::fs::read(&path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => panic!("{}: {e}", path.display()),
        };
        let r = std::panic::catch_unwind(|| run(&data));
        assert!(r.is_ok(), "{target}: {} panicked", path.display());
        n += 1;
    }
    assert!(n >= 3, "{target}: only {n} inputs in {}", dir.display());
    println!("{target}: {n} inputs replayed");
}

#[test]
fn range() {
    replay("range", entries::range);
}

#[test]
fn disk_block() {
    replay("disk_block", entries::disk_block);
}

#[test]
fn config() {
    replay("config", entries::config);
}

#[test]
fn list_xml() {
    replay("list_xml", entries::list_xml);
}

#[test]
fn request() {
    replay("request", entries::request);
}

#[test]
fn sigv4() {
    replay("sigv4", entries::sigv4);
}

#[test]
fn scope() {
    replay("scope", entries::scope);
}

#[test]
fn policy() {
    replay("policy", entries::policy);
}

#[test]
fn http_head() {
    replay("http_head", entries::http1::http_head);
}

#[test]
fn chunked() {
    replay("chunked", entries::http1::chunked);
}
