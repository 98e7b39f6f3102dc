//! Replays every input kept in `fuzz/corpus/h2_authority/` (seeds, what the
//! fuzzer found interesting, every crash it found) through the fuzz target's
//! entry point: a client's bytes through the `:authority` rewriter. A panic is a
//! failure.

use std::path::PathBuf;

#[path = "../../../fuzz/src/h2_authority.rs"]
mod entries;

#[test]
fn h2_authority_corpus() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/h2_authority");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    let mut n = 0;
    for path in paths {
        let data = std::fs::read(&path).unwrap();
        let r = std::panic::catch_unwind(|| entries::h2_authority(&data));
        assert!(r.is_ok(), "{} panicked", path.display());
        n += 1;
    }
    assert!(n >= 3, "only {n} inputs in {}", dir.display());
}
