//! Replays `fuzz/corpus/journal/` through the entry the fuzz target calls.

#[path = "../../../fuzz/src/journal.rs"]
mod entry;

#[test]
fn journal_corpus() {
    shoal_testkit::replay_corpus("journal", entry::journal);
}
