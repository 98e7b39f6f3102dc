//! Entry points for the fuzz targets in `fuzz_targets/` and for the test that
//! replays their corpora (`cachenode/tests/fuzz_corpora.rs` includes this file),
//! so both run exactly the same code, and none of it ships in the node.
//!
//! Each takes arbitrary bytes, must never panic, and checks what a parse promises
//! when it succeeds (a span inside the object, a header inside the file, ...).

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
