//! Replays every input kept in `fuzz/corpus/<target>/` (seeds, what the fuzzers
//! found interesting, and every crash they ever found, kept as regressions) through
//! the same entry points the fuzz targets call. A panic is a failure.

#[path = "../../../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod entries;

use shoal_testkit::replay_corpus as replay;

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
fn endpoint_slices() {
    replay("endpoint_slices", entries::endpoint_slices);
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

#[test]
fn handover_message() {
    replay("handover_message", entries::handover_message);
}
