//! Replays every input kept in `fuzz/corpus/fuse_request/` (seeds, what the
//! fuzzer found interesting, every crash it found) through the fuzz target's
//! entry point. A panic is a failure.

use std::path::PathBuf;

#[path = "../../fuzz/src/fuse_request.rs"]
mod entries;

#[test]
fn fuse_request_corpus() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/fuse_request");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    let mut n = 0;
    for path in paths {
        let data = std::fs::read(&path).unwrap();
        let r = std::panic::catch_unwind(|| entries::fuse_request(&data));
        assert!(r.is_ok(), "{} panicked", path.display());
        n += 1;
    }
    assert!(n >= 3, "only {n} inputs in {}", dir.display());
}
