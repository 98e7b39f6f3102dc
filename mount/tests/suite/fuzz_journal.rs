//! Replays every input kept in `fuzz/corpus/journal/` (seeds, what the fuzzer
//! found interesting, and any crash it found, kept as a regression) through the
//! entry the fuzz target calls. A panic is a failure.

use std::path::PathBuf;

#[path = "../../../fuzz/src/journal.rs"]
mod entry;

#[test]
fn journal_corpus() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/journal");
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
        let r = std::panic::catch_unwind(|| entry::journal(&data));
        assert!(r.is_ok(), "{} panicked", path.display());
        n += 1;
    }
    assert!(n >= 3, "only {n} inputs in {}", dir.display());
    println!("journal: {n} inputs replayed");
}
