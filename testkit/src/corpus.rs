//! Fuzz corpora replayed in the test suites: every input kept in
//! `fuzz/corpus/<target>/` (seeds, what the fuzzer found interesting, every
//! crash it found) through the entry the fuzz target calls.

use std::path::PathBuf;

/// Runs `run` on every input of `fuzz/corpus/<target>/`; a panic fails the test,
/// naming the input, and so does a corpus of fewer than three inputs.
pub fn replay_corpus(target: &str, run: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    let mut n = 0;
    for path in paths {
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
