//! Replays `fuzz/corpus/h2_authority/` through the entry the fuzz target calls:
//! a client's bytes through the `:authority` rewriter.

#[path = "../../../fuzz/src/h2_authority.rs"]
mod entries;

#[test]
fn h2_authority_corpus() {
    shoal_testkit::replay_corpus("h2_authority", entries::h2_authority);
}
