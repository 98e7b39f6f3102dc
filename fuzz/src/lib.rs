//! Entry points for the fuzz targets in `fuzz_targets/` and for the test that
//! replays their corpora (`cachenode/tests/fuzz_corpora.rs` includes this file),
//! so both run exactly the same code, and none of it ships in the node.
//!
//! Each takes arbitrary bytes, must never panic, and checks what a parse promises
//! when it succeeds (a span inside the object, a header inside the file, ...).

pub mod http1;
// Replayed by the mount's suite (`mount/tests/suite/fuzz_journal.rs`), which
// has shoal-mount; the node's, which includes this file, has not.
#[cfg(not(test))]
pub mod journal;

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use shoal::blocks::{decode_block, decode_header, encode_header, BlockKey};
use shoal::config::{Config, Env};
use shoal::store::s3::parse;

/// The key the fuzzed node accepts, so seeds can carry real signatures.
pub const NODE_KEY: &str = "fuzzkey";
pub const NODE_SECRET: &str = "fuzzsecret";

/// A `Range` header as the node reads it, and a `Content-Range` as the client does.
pub fn range(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(r) = s3s::dto::Range::parse(text) {
        for size in [0u64, 1, 4096, 1 << 20, u64::MAX] {
            if let Ok((start, end, cr)) = shoal_node::api::byte_span(&r, size) {
                assert!(start < end && end <= size, "{text:?} on {size}");
                assert_eq!(parse::content_range(&cr), Some((start, end, size)));
            }
        }
        let again = s3s::dto::Range::parse(&r.to_header_string()).expect("own header parses");
        assert_eq!(again.to_header_string(), r.to_header_string());
    }
    if let Some((a, b, total)) = parse::content_range(text) {
        assert!(a < b && b <= total, "{text:?}");
    }
}

/// A block file as the disk tier reads it at start (header only) and on a hit.
pub fn disk_block(data: &[u8]) {
    let Ok(h) = decode_header(data) else {
        return;
    };
    assert!(h.header_len <= data.len());
    if let Ok(body) = decode_block(data, &h.key) {
        assert_eq!(body.len() as u64, h.data_len);
        // What decodes must be what the encoder writes for it.
        let mut again = encode_header(&h.key, body);
        again.extend_from_slice(body);
        assert_eq!(again, data);
    }
    let other = BlockKey::new("b", "k", "e", h.key.block_size, h.key.index.wrapping_add(1));
    assert!(decode_block(data, &other).is_err());
}

struct NoEnv;

impl Env for NoEnv {
    fn var(&self, _: &str) -> Option<String> {
        None
    }
    fn read_file(&self, _: &str) -> Option<String> {
        None
    }
}

/// A config file, through every section a program would ask for.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(cfg) = Config::parse(text, "fuzz.toml", &NoEnv) {
        let _ = cfg.origin();
        let _ = cfg.node();
        let _ = cfg.auth();
        let _ = cfg.cluster();
        // A node's background tasks (fan-out, DNS refresh) need a runtime.
        let n = node();
        let _ =
            n.rt.block_on(async { shoal_node::build(&cfg, None).map(drop) });
    }
}

/// A ListObjectsV2 page and an error body, as the client reads them.
pub fn list_xml(data: &[u8]) {
    if let Ok(page) = parse::list_objects(data) {
        for c in &page.contents {
            let _ = shoal::store::s3::key_problem(&c.key);
        }
    }
    let _ = parse::error_body(data);
}

/// The Kubernetes API's answers a membership reads: a list of EndpointSlices,
/// and a watch's lines applied in turn, then the nodes they name.
pub fn endpoint_slices(data: &[u8]) {
    use shoal::route::kube::Slices;
    let svc = shoal::config::KubeService {
        namespace: "shoal".into(),
        service: "shoal-node".into(),
        port: Some("s3".into()),
        api: "http://127.0.0.1:1".into(),
        token_file: "/nonexistent".into(),
        ca_file: None,
    };
    if let Ok((s, _)) = Slices::from_list(&svc, data) {
        let _ = s.nodes();
    }
    let mut slices = Slices::default();
    let mut version = String::new();
    for line in data.split(|b| *b == b'\n') {
        if slices.apply_event(&svc, line, &mut version).is_err() {
            break;
        }
    }
    for n in slices.nodes() {
        assert!(shoal::config::canonical_node_id(&n.id).as_deref() == Ok(n.id.as_str()));
    }
}

struct Fuzzed {
    rt: tokio::runtime::Runtime,
    app: Arc<shoal_node::App>,
    /// Open (no auth), with caching rules: fuzzed requests reach the handlers
    /// here, not just the signature check.
    open: Arc<shoal_node::App>,
}

/// One node with SigV4 keys, built once per process. Its origin is a closed port,
/// so a request that gets through to a read fails fast with an origin error.
fn node() -> &'static Fuzzed {
    static NODE: OnceLock<Fuzzed> = OnceLock::new();
    NODE.get_or_init(|| {
        let toml = format!(
            r#"[origin]
endpoint = "http://127.0.0.1:9"
max_attempts = 1
[origin.credentials]
access_key_id = "o"
secret_access_key = "o"
[node]
listen = "127.0.0.1:0"
domains = ["s3.fuzz.test"]
[auth]
[[auth.keys]]
access_key_id = "{NODE_KEY}"
secret_access_key = "{NODE_SECRET}"
"#
        );
        let cfg = Config::parse(&toml, "fuzz.toml", &NoEnv).expect("fuzz node config");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let app = rt
            .block_on(async { shoal_node::build(&cfg, None) })
            .expect("fuzz node")
            .0;
        let open_toml = r#"[origin]
endpoint = "http://127.0.0.1:9"
max_attempts = 1
[origin.credentials]
anonymous = true
[node]
listen = "127.0.0.1:0"
[auth]
mode = "none"
[[rules]]
pattern = "bucket/cached/**"
page_size = "64KiB"
ttl = "1s"
"#;
        let open_cfg = Config::parse(open_toml, "fuzz-open.toml", &NoEnv).expect("open config");
        let open = rt
            .block_on(async { shoal_node::build(&open_cfg, None) })
            .expect("open fuzz node")
            .0;
        Fuzzed { rt, app, open }
    })
}

/// `METHOD URI` on the first line, `name: value` header lines, a blank line, a body:
/// the whole S3 front of the node (path and virtual-host parsing, percent-decoding,
/// query, SigV4 header and presigned parsing, ranges, the purge route).
pub fn request(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (head, body) = text.split_once("\n\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let Some((method, uri)) = lines.next().and_then(|l| l.split_once(' ')) else {
        return;
    };
    let mut req = http::Request::builder().method(method).uri(uri);
    for l in lines {
        if let Some((n, v)) = l.split_once(':') {
            req = req.header(n.trim(), v.trim());
        }
    }
    let Ok(mut req) = req.body(s3s::Body::from(Bytes::copy_from_slice(body.as_bytes()))) else {
        return;
    };
    // The same request, unsigned, to the open node (as the server does with auth off).
    let mut open = http::Request::builder()
        .method(req.method().clone())
        .uri(req.uri().clone())
        .body(s3s::Body::from(Bytes::copy_from_slice(body.as_bytes())))
        .expect("parts of a valid request");
    *open.headers_mut() = req.headers().clone();
    open.headers_mut().remove(http::header::AUTHORIZATION);
    let n = node();
    let _ = n.rt.block_on(n.open.s3.call(open));
    req.headers_mut().remove("x-fuzz-none");
    send(req);
}

/// An `Authorization` header (first line), an `x-amz-date` (second) and a query
/// string (third, for the presigned form) on an otherwise plain GET.
pub fn sigv4(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(3, '\n');
    let auth = parts.next().unwrap_or("");
    let date = parts.next().unwrap_or("");
    let query = parts.next().unwrap_or("");
    let uri = if query.is_empty() {
        "/bucket/key".to_owned()
    } else {
        format!("/bucket/key?{query}")
    };
    let mut req = http::Request::builder()
        .method("GET")
        .uri(uri)
        .header("host", "127.0.0.1")
        .header("x-amz-content-sha256", "UNSIGNED-PAYLOAD");
    if !auth.is_empty() {
        req = req.header("authorization", auth);
    }
    if !date.is_empty() {
        req = req.header("x-amz-date", date);
    }
    let Ok(req) = req.body(s3s::Body::empty()) else {
        return;
    };
    send(req);
}

fn send(req: http::Request<s3s::Body>) {
    let n = node();
    let signed = req.headers().contains_key("authorization") || req.uri().query().is_some();
    if let Ok(resp) = n.rt.block_on(n.app.s3.call(req)) {
        // No request with a made-up signature may read anything.
        let ok = resp.status().is_success();
        assert!(!ok || signed, "unsigned request answered {}", resp.status());
    }
}

/// An `allow` list, one entry a line: what parses prints back as itself, and a
/// grant covers exactly the keys under its prefix.
pub fn scope(data: &[u8]) {
    use shoal::scope::{Action, Scope, Target};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let entries: Vec<&str> = text.split('\n').collect();
    let Ok(scope) = Scope::parse(&entries) else {
        return;
    };
    let printed: Vec<String> = scope.grants.iter().map(|g| g.to_string()).collect();
    assert_eq!(Scope::parse(&printed).expect("own print parses"), scope);
    for g in &scope.grants {
        let bucket = g.bucket.as_deref().unwrap_or("any-bucket");
        let inside = format!("{}x", g.prefix);
        for a in Action::ALL {
            let acts = g.action.is_none_or(|ga| ga == a);
            assert_eq!(g.covers(a, Target::Key(bucket, &inside)), acts, "{g}");
            // A listing of a longer prefix stays inside; of a shorter one, not.
            assert_eq!(g.covers(a, Target::Prefix(bucket, &inside)), acts, "{g}");
            if let Some(shorter) = g.prefix.get(..g.prefix.len().saturating_sub(1)) {
                if !g.prefix.is_empty() && g.prefix.is_char_boundary(shorter.len()) {
                    assert!(!g.covers(a, Target::Prefix(bucket, shorter)), "{g}");
                }
            }
            assert_eq!(
                g.covers(a, Target::Bucket(bucket)),
                acts && g.prefix.is_empty(),
                "{g}"
            );
        }
        assert!(scope.touches(bucket));
    }
}

/// An `allow` list (lines), a blank line, then a request (`METHOD URI` and
/// header lines): what the node asks of the policy for it, checked against a key
/// with that scope, one allowed everything, one allowed nothing and one with no
/// allow list. Everything is refused by an empty scope, nothing by `*:*`, and a
/// key without a list never writes or purges.
pub fn policy(data: &[u8]) {
    use shoal::config::{AuthKey, Credentials, KeyLimits};
    use shoal::scope::{Action, Scope};
    use shoal_node::access::{classify, Policy, Request};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (allow, req) = text.split_once("\n\n").unwrap_or((text, "GET /bucket/key"));
    let entries: Vec<&str> = allow.lines().collect();
    let Ok(scope) = Scope::parse(&entries) else {
        return;
    };
    let mut lines = req.lines();
    let Some((method, uri)) = lines.next().and_then(|l| l.split_once(' ')) else {
        return;
    };
    let (Ok(method), Ok(uri)) = (
        http::Method::from_bytes(method.as_bytes()),
        uri.parse::<http::Uri>(),
    ) else {
        return;
    };
    let mut headers = http::HeaderMap::new();
    for l in lines {
        if let Some((n, v)) = l.split_once(':') {
            if let (Ok(n), Ok(v)) = (
                http::HeaderName::from_bytes(n.trim().as_bytes()),
                http::HeaderValue::from_str(v.trim()),
            ) {
                headers.append(n, v);
            }
        }
    }
    let domains = ["s3.fuzz.test".to_owned()];
    let (bucket, key) =
        shoal_node::api::passthrough::address(&uri, &headers, &domains).unwrap_or_default();
    let query = shoal_node::api::passthrough::query_pairs(&uri);
    let has = |n: &str| query.iter().any(|(k, _)| k == n);
    let param = |n: &str| query.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let asked = if method == http::Method::POST && has("shoal-purge") {
        let t = shoal::node_proto::Purge::from_params(param("key"), param("prefix"), param("keep"));
        classify::purge(
            &bucket,
            &t.into_iter().collect::<Vec<_>>(),
            has("shoal-local"),
        )
    } else if method == http::Method::GET || method == http::Method::HEAD {
        if key.is_empty() {
            classify::bucket_read(&method, &bucket, &query)
        } else {
            classify::object_read(&bucket, &key, &query)
        }
    } else if method == http::Method::PUT || method == http::Method::DELETE {
        let src = headers
            .get("x-amz-copy-source")
            .and_then(|v| v.to_str().ok());
        classify::passed_write(&bucket, &key, src)
    } else {
        let op = if has("delete") {
            "DeleteObjects"
        } else {
            "CompleteMultipartUpload"
        };
        classify::op(op, Some(&bucket), (!key.is_empty()).then_some(key.as_str()))
    };
    let key_with = |id: &str, allow: Option<Scope>| AuthKey {
        credentials: Credentials {
            access_key_id: id.into(),
            secret_access_key: "s".into(),
            session_token: None,
        },
        allow,
        limits: KeyLimits::default(),
    };
    let keys = [
        key_with("fuzzed", Some(scope.clone())),
        key_with("all", Some(Scope::parse(&["*:*"]).unwrap())),
        key_with("none", Some(Scope { grants: vec![] })),
        key_with("plain", None),
    ];
    let p = Policy::new(&keys, None);
    assert!(p.admit(Some("all"), &asked).is_ok(), "{asked:?}");
    assert!(p.admit(None, &asked).is_err());
    let empty = matches!(&asked, Request::All(a) | Request::LocalPurge(a) if a.is_empty());
    assert_eq!(p.admit(Some("none"), &asked).is_ok(), empty, "{asked:?}");
    if let Request::All(asks) | Request::LocalPurge(asks) = &asked {
        let writes = asks
            .iter()
            .any(|a| matches!(a.action, Action::Write | Action::Purge));
        if writes {
            assert!(p.admit(Some("plain"), &asked).is_err(), "{asked:?}");
        }
        if p.admit(Some("fuzzed"), &asked).is_ok() {
            assert!(
                asks.iter().all(|a| scope.has(a.action)),
                "{asked:?} by {scope}"
            );
        }
    }
}

/// A packet on the handover link, read as the node reads it (lossy UTF-8): a
/// message taken writes back as itself and fits one packet.
pub fn handover_message(data: &[u8]) {
    use shoal_node::handover::Message;
    let text = String::from_utf8_lossy(data);
    if let Ok(m) = Message::parse(&text) {
        let again = m.to_string();
        assert!(again.len() < 4096, "{} bytes", again.len());
        assert_eq!(Message::parse(&again), Ok(m), "{text:?}");
    }
}
