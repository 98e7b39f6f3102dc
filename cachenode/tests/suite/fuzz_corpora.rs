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

/// The corpus's `api-*` inputs are answers as the Kubernetes API server
/// writes them (a list, or a watch's lines): each must parse, to the nodes it
/// names.
#[test]
fn endpoint_slices_api_answers() {
    use shoal::route::kube::{Slices, WatchError};
    let svc = shoal::config::KubeService {
        namespace: "shoal".into(),
        service: "shoal-node".into(),
        port: Some("s3".into()),
        api: "http://127.0.0.1:1".into(),
        token_file: "/nonexistent".into(),
        ca_file: None,
    };
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/endpoint_slices");
    for (name, nodes) in [
        ("api-list-empty", 0),
        ("api-list-no-pod", 0),
        ("api-list-pods", 3),
        ("api-watch-last-pod-goes", 1),
        ("api-watch-split", 4),
    ] {
        let body = std::fs::read(dir.join(name)).unwrap();
        let slices = if name.starts_with("api-list") {
            Slices::from_list(&svc, &body)
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .0
        } else {
            let (mut slices, mut v) = (Slices::default(), String::new());
            for line in body.split(|b| *b == b'\n') {
                match slices.apply_event(&svc, line, &mut v) {
                    Ok(_) | Err(WatchError::Expired) => {}
                    Err(e) => panic!("{name}: {e}"),
                }
            }
            slices
        };
        assert_eq!(slices.nodes().len(), nodes, "{name}");
    }
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
