//! S3 fidelity: the same requests sent to an origin directly, through a node, and
//! through a gateway (a node whose misses go to two owner nodes) get the same
//! answers: status, error code, the headers a client acts on, body bytes, and
//! listings byte for byte. Run against two origins: shoal's test origin and moto's
//! independent S3 server, and each origin is also held to what S3 documents
//! (decoded listing keys, an untruncated `max-keys=0`, auth error codes).
//!
//! What a cache node must not copy, and is not compared: per-request headers
//! (`x-amz-request-id`, `x-amz-id-2`, `Date`, `Server`, `Connection`), the
//! cache's own `Cache-Status` (checked to be there on every object answer a
//! node gives), and the message, request id and host id inside an error body
//! (the code is compared).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::common::*;
use bytes::Bytes;
use http::Method;
use shoal::config::Credentials;
use shoal::store::s3::{encode_path, query_value, Payload, S3Client, Signer};
use shoal::store::GetObject;

mod s3tests;
mod uploads;

/// Answer headers a client acts on, compared between the origin and a node.
const COMPARED: &[&str] = &[
    "etag",
    "content-length",
    "content-range",
    "last-modified",
    "accept-ranges",
    "content-type",
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "expires",
    "x-amz-storage-class",
    "x-amz-mp-parts-count",
    "x-amz-meta-color",
];

/// Headers compared on a 304 answer, where the origin sends them.
const ANSWER_COMPARED: &[&str] = &[
    "etag",
    "last-modified",
    "cache-control",
    "expires",
    "content-location",
    "vary",
    "content-type",
];

/// Headers that hold dates: compared as dates (formats may differ in spacing).
const DATES: &[&str] = &["last-modified", "expires"];

struct Target {
    name: &'static str,
    endpoint: String,
    access: String,
    secret: String,
}

#[derive(Clone, Debug)]
struct Req {
    method: Method,
    key: String,
    query: Vec<(String, String)>,
    headers: Vec<(String, String)>,
    body: Bytes,
    /// Another bucket than the test's (a missing one, say).
    bucket: Option<String>,
    /// What S3 documents for this request, where an origin might not answer so:
    /// the status, and a header the answer must carry.
    s3_status: Option<u16>,
    s3_header: Option<(&'static str, String)>,
    /// The body sent in HTTP chunks, with no Content-Length.
    chunked: bool,
}

fn req(method: Method, key: &str) -> Req {
    Req {
        method,
        key: key.to_owned(),
        query: vec![],
        headers: vec![],
        body: Bytes::new(),
        bucket: None,
        s3_status: None,
        s3_header: None,
        chunked: false,
    }
}

impl Req {
    fn q(mut self, k: &str, v: &str) -> Req {
        self.query.push((k.to_owned(), v.to_owned()));
        self
    }
    fn h(mut self, k: &str, v: &str) -> Req {
        self.headers.push((k.to_owned(), v.to_owned()));
        self
    }
    /// Headers written `name=value;name=value` (none for `""`).
    fn h_opt(mut self, list: &str) -> Req {
        for pair in list.split(';').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').expect("name=value");
            self = self.h(k, v);
        }
        self
    }
    fn in_bucket(mut self, b: &str) -> Req {
        self.bucket = Some(b.to_owned());
        self
    }
    /// S3 answers this with `status`.
    fn s3(mut self, status: u16) -> Req {
        self.s3_status = Some(status);
        self
    }
    /// S3's answer to this carries header `name` with `value`.
    fn s3_with(mut self, name: &'static str, value: &str) -> Req {
        self.s3_header = Some((name, value.to_owned()));
        self
    }
    /// How `a` falls short of what S3 documents for this request, if it does.
    fn short_of_s3(&self, a: &Answer) -> Option<String> {
        if let Some(want) = self.s3_status.filter(|w| *w != a.status) {
            return Some(format!("status {} where S3 answers {want}", a.status));
        }
        match &self.s3_header {
            Some((name, value)) if a.headers.get(*name) != Some(value) => Some(format!(
                "{name}: {:?} where S3 answers {value:?}",
                a.headers.get(*name)
            )),
            _ => None,
        }
    }
}

/// How a request is signed.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Signing {
    Proper,
    UnknownKey,
    WrongSecret,
    /// Signed an hour ago.
    Skewed,
    Anonymous,
}

#[derive(Debug)]
struct Answer {
    status: u16,
    headers: BTreeMap<String, String>,
    body: Bytes,
}

impl Answer {
    /// The `<Code>` of an error body.
    fn code(&self) -> Option<String> {
        let text = std::str::from_utf8(&self.body).ok()?;
        let start = text.find("<Code>")? + 6;
        let end = text[start..].find("</Code>")? + start;
        Some(text[start..end].to_owned())
    }
}

async fn send(http: &reqwest::Client, t: &Target, bucket: &str, r: &Req, how: Signing) -> Answer {
    let bucket = r.bucket.as_deref().unwrap_or(bucket);
    let mut query: Vec<String> = r
        .query
        .iter()
        .map(|(k, v)| format!("{}={}", query_value(k), query_value(v)))
        .collect();
    query.sort();
    let path = if r.key.is_empty() {
        format!("/{}", encode_path(bucket))
    } else {
        format!("/{}/{}", encode_path(bucket), encode_path(&r.key))
    };
    let q = if query.is_empty() {
        String::new()
    } else {
        format!("?{}", query.join("&"))
    };
    let url = format!("{}{path}{q}", t.endpoint);
    let host = t.endpoint.trim_start_matches("http://").to_owned();
    let mut headers: Vec<(String, String)> = r.headers.clone();
    if how != Signing::Anonymous {
        let creds = Credentials {
            access_key_id: match how {
                Signing::UnknownKey => "AKIANOSUCHKEY0000000".into(),
                _ => t.access.clone(),
            },
            secret_access_key: match how {
                Signing::WrongSecret => "not-the-secret".into(),
                _ => t.secret.clone(),
            },
            session_token: None,
        };
        let at = match how {
            Signing::Skewed => SystemTime::now() - Duration::from_secs(3600),
            _ => SystemTime::now(),
        };
        let mut to_sign: Vec<(&str, &str)> = vec![("host", &host)];
        to_sign.extend(r.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let added = Signer::new(&creds, "us-east-1")
            .sign_headers(
                r.method.as_str(),
                &url,
                &to_sign,
                Payload::Bytes(&r.body),
                at,
            )
            .unwrap();
        headers.extend(added);
    }
    let body = if r.chunked {
        uploads::chunked_body(r)
    } else {
        reqwest::Body::from(r.body.clone())
    };
    let mut rb = http.request(r.method.clone(), &url).body(body);
    for (k, v) in &headers {
        rb = rb.header(k, v);
    }
    let resp = rb
        .send()
        .await
        .unwrap_or_else(|e| panic!("{} {url}: {e}", t.name));
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = resp.bytes().await.unwrap_or_default();
    Answer {
        status,
        headers,
        body,
    }
}

/// Whether header `h` has the same value in two answers (dates as dates: formats
/// may differ in spacing).
fn same_header(h: &str, x: Option<&String>, y: Option<&String>) -> bool {
    if DATES.contains(&h) {
        x.map(|v| httpdate::parse_http_date(v).ok()) == y.map(|v| httpdate::parse_http_date(v).ok())
    } else {
        x == y
    }
}

/// How `b` differs from `a`, the origin's answer; empty when alike.
fn differences(a: &Answer, b: &Answer, method: &Method) -> Vec<String> {
    let mut out = Vec::new();
    if a.status != b.status {
        out.push(format!("status {} vs {}", a.status, b.status));
        return out;
    }
    if a.status >= 300 {
        if a.code() != b.code() {
            out.push(format!("code {:?} vs {:?}", a.code(), b.code()));
        }
        // What the origin's 304 carries, the node's must carry too (its
        // validators above all: clients read its ETag), and an error body is
        // the same type; the node may add what S3 sends where an origin leaves
        // it out. (moto answers a HEAD's 412 with the object's own headers, as
        // if it were a 200: that is not compared.)
        let compared: &[&str] = match (a.status, method) {
            (304, _) => ANSWER_COMPARED,
            (_, &Method::GET) => &["content-type"],
            _ => &[],
        };
        for h in compared {
            let (x, y) = (a.headers.get(*h), b.headers.get(*h));
            if x.is_some() && !same_header(h, x, y) {
                out.push(format!("{h} on a {}: {x:?} vs {y:?}", a.status));
            }
        }
        return out;
    }
    for h in COMPARED {
        let (x, y) = (a.headers.get(*h), b.headers.get(*h));
        if !same_header(h, x, y) {
            out.push(format!("{h}: {x:?} vs {y:?}"));
        }
    }
    // An object answer says what the cache did; the origin's never does.
    if a.headers.contains_key("etag")
        && !b
            .headers
            .get("cache-status")
            .is_some_and(|v| v.starts_with("shoal; "))
    {
        out.push(format!(
            "no Cache-Status: {:?}",
            b.headers.get("cache-status")
        ));
    }
    if *method == Method::GET && a.body != b.body {
        out.push(format!(
            "body of {} bytes vs {} bytes{}",
            a.body.len(),
            b.body.len(),
            if a.body.len() == b.body.len() {
                " (different bytes)"
            } else {
                ""
            }
        ));
    }
    out
}

/// The keys of a listing, decoded as S3 encodes them under `encoding-type=url`.
fn listed_keys(body: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(body);
    let url = text.contains("<EncodingType>url</EncodingType>");
    text.split("<Key>")
        .skip(1)
        .filter_map(|s| s.split_once("</Key>").map(|(k, _)| k))
        .map(|k| {
            let k = k
                .replace("&amp;", "&")
                .replace("&lt;", "<")
                .replace("&gt;", ">");
            if url {
                percent_encoding::percent_decode_str(&k.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned()
            } else {
                k
            }
        })
        .collect()
}

const MIB: usize = 1 << 20;

/// The objects every run stores, with S3's odd keys among them.
fn objects() -> Vec<(String, Bytes)> {
    let mut v: Vec<(String, Bytes)> = [
        ("plain.txt", data(100, 1)),
        ("dir/a b+c%d.txt", data(10, 2)),
        ("ctl/x\u{1}y", data(5, 3)),
        ("cr/a\rb", data(5, 4)),
        ("uni/日本語 ü.txt", data(7, 5)),
        ("empty", Bytes::new()),
        ("big.bin", data(3 * MIB + 5, 6)),
        ("list/a", data(1, 7)),
        ("list/b/c", data(1, 8)),
        ("list/b/d", data(1, 9)),
        ("list/e", data(1, 10)),
        ("list/f/g", data(1, 11)),
    ]
    .into_iter()
    .map(|(k, d)| (k.to_owned(), d))
    .collect();
    v.push((format!("long/{}", "k".repeat(1019)), data(3, 12)));
    v
}

/// What the plain object is stored with.
const STORED: &[(&str, &str)] = &[
    ("content-type", "text/plain; charset=utf-8"),
    ("cache-control", "max-age=60"),
    ("content-disposition", "inline; filename=\"plain.txt\""),
    ("content-encoding", "identity"),
    ("content-language", "en"),
    ("expires", "Fri, 01 Jan 2049 00:00:00 GMT"),
    ("x-amz-meta-color", "blue"),
];

/// Every request of the suite, with what it is.
fn cases(etag: &str) -> Vec<(String, Req)> {
    let mut v: Vec<(String, Req)> = Vec::new();
    let mut add = |what: &str, r: Req| v.push((what.to_owned(), r));
    // First, while its block is cold: a small read deep inside a block, which a
    // node asks of the origin on its own beside the block's fetch.
    let deep = format!("bytes={}-{}", MIB + 600_000, MIB + 604_095);
    add(
        "GET big deep in a cold block",
        req(Method::GET, "big.bin").h("range", &deep).s3(206),
    );
    for (key, _) in objects() {
        add(&format!("GET {key:?}"), req(Method::GET, &key));
        add(&format!("HEAD {key:?}"), req(Method::HEAD, &key));
    }
    let size = 3 * MIB + 5;
    for range in [
        "bytes=0-9".to_owned(),
        format!("bytes={}-{}", MIB - 6, MIB + 5),
        "bytes=10-".to_owned(),
        "bytes=-7".to_owned(),
        "bytes=0-99999999".to_owned(),
        format!("bytes={}-{}", size - 1, size + 100),
        format!("bytes={size}-"),
        format!("bytes={}-", size + 1000),
    ] {
        let past =
            range.ends_with(&format!("{size}-")) || range.contains(&format!("{}-", size + 1000));
        let status = if past { 416 } else { 206 };
        add(
            &format!("GET big {range}"),
            req(Method::GET, "big.bin").h("range", &range).s3(status),
        );
        add(
            &format!("HEAD big {range}"),
            req(Method::HEAD, "big.bin").h("range", &range).s3(status),
        );
    }
    add(
        "GET empty with a range",
        req(Method::GET, "empty").h("range", "bytes=0-0"),
    );
    add(
        "GET plain past its end",
        req(Method::GET, "plain.txt").h("range", "bytes=99-200"),
    );
    let quoted = format!("\"{etag}\"");
    let past = "Sat, 01 Jan 2000 00:00:00 GMT";
    let future = "Fri, 01 Jan 2100 00:00:00 GMT";
    // With S3's documented answer (RFC 7232's order; S3's docs spell out both
    // pairs at the end).
    type Condition<'a> = (&'a str, Vec<(&'a str, &'a str)>, u16);
    let conditions: Vec<Condition> = vec![
        ("If-Match right", vec![("if-match", &quoted)], 200),
        ("If-Match wrong", vec![("if-match", "\"0123\"")], 412),
        ("If-Match *", vec![("if-match", "*")], 200),
        ("If-None-Match right", vec![("if-none-match", &quoted)], 304),
        (
            "If-None-Match wrong",
            vec![("if-none-match", "\"0123\"")],
            200,
        ),
        (
            "If-Modified-Since past",
            vec![("if-modified-since", past)],
            200,
        ),
        (
            "If-Modified-Since future",
            vec![("if-modified-since", future)],
            304,
        ),
        (
            "If-Unmodified-Since past",
            vec![("if-unmodified-since", past)],
            412,
        ),
        (
            "If-Unmodified-Since future",
            vec![("if-unmodified-since", future)],
            200,
        ),
        (
            "If-Match right with If-Unmodified-Since past",
            vec![("if-match", &quoted), ("if-unmodified-since", past)],
            200,
        ),
        (
            "If-None-Match wrong with If-Modified-Since future",
            vec![("if-none-match", "\"0123\""), ("if-modified-since", future)],
            200,
        ),
    ];
    for (what, hs, status) in conditions {
        for method in [Method::GET, Method::HEAD] {
            let mut r = req(method.clone(), "plain.txt").s3(status);
            if status == 304 {
                // A 304 carries the ETag (RFC 9110, and S3 does).
                r = r.s3_with("etag", &quoted);
            }
            for (k, v) in &hs {
                r = r.h(k, v);
            }
            add(&format!("{method} plain {what}"), r);
        }
    }
    for (k, v) in [
        ("response-content-type", "application/x-test"),
        ("response-cache-control", "no-store"),
        ("response-content-disposition", "attachment; filename=\"x\""),
        ("response-content-encoding", "gzip"),
        ("response-content-language", "fr"),
        ("response-expires", "Thu, 01 Jan 2037 00:00:00 GMT"),
    ] {
        let header = k.strip_prefix("response-").unwrap();
        add(
            &format!("GET plain {k}"),
            req(Method::GET, "plain.txt").q(k, v).s3_with(header, v),
        );
    }
    for n in ["1", "2", "3"] {
        add(
            &format!("GET multi partNumber={n}"),
            req(Method::GET, "multi.bin").q("partNumber", n),
        );
        add(
            &format!("HEAD multi partNumber={n}"),
            req(Method::HEAD, "multi.bin").q("partNumber", n),
        );
    }
    add(
        "GET plain partNumber=1",
        req(Method::GET, "plain.txt").q("partNumber", "1"),
    );
    add("GET missing key", req(Method::GET, "no/such/key"));
    add("HEAD missing key", req(Method::HEAD, "no/such/key"));
    add(
        "GET in a missing bucket",
        req(Method::GET, "k").in_bucket("no-such-bucket-x1"),
    );
    add(
        "HEAD in a missing bucket",
        req(Method::HEAD, "k").in_bucket("no-such-bucket-x1"),
    );
    // Listings.
    let v2 = || req(Method::GET, "").q("list-type", "2");
    add("V2 prefix", v2().q("prefix", "list/"));
    add(
        "V2 prefix and delimiter",
        v2().q("prefix", "list/").q("delimiter", "/"),
    );
    for m in ["0", "1", "1000"] {
        add(
            &format!("V2 max-keys={m}"),
            v2().q("prefix", "list/").q("max-keys", m),
        );
    }
    add(
        "V2 start-after",
        v2().q("prefix", "list/").q("start-after", "list/b/c"),
    );
    add("V2 encoding-type=url", v2().q("encoding-type", "url"));
    add(
        "V2 encoding-type=url with a delimiter",
        v2().q("encoding-type", "url").q("delimiter", "/"),
    );
    add(
        "V2 fetch-owner",
        v2().q("prefix", "list/").q("fetch-owner", "true"),
    );
    add("V2 missing bucket", v2().in_bucket("no-such-bucket-x1"));
    let v1 = || req(Method::GET, "");
    add(
        "V1 prefix and delimiter",
        v1().q("prefix", "list/").q("delimiter", "/"),
    );
    add(
        "V1 marker",
        v1().q("prefix", "list/").q("marker", "list/b/"),
    );
    add(
        "V1 max-keys=1",
        v1().q("prefix", "list/").q("max-keys", "1"),
    );
    add("V1 encoding-type=url", v1().q("encoding-type", "url"));
    add("HeadBucket", req(Method::HEAD, ""));
    add(
        "HeadBucket missing",
        req(Method::HEAD, "").in_bucket("no-such-bucket-x1"),
    );
    // What is said about an object or a bucket rather than its bytes: passed
    // through, answered as the origin answers (or refuses) it.
    add(
        "GetObjectAttributes",
        req(Method::GET, "plain.txt")
            .q("attributes", "")
            .h("x-amz-object-attributes", "ETag,ObjectSize,StorageClass"),
    );
    for sub in ["acl", "tagging"] {
        add(
            &format!("GET object ?{sub}"),
            req(Method::GET, "plain.txt").q(sub, ""),
        );
    }
    add(
        "GET missing object ?acl",
        req(Method::GET, "no/such/key").q("acl", ""),
    );
    for sub in [
        "acl",
        "versioning",
        "location",
        "tagging",
        "policy",
        "uploads",
        "versions",
    ] {
        add(
            &format!("GET bucket ?{sub}"),
            req(Method::GET, "").q(sub, ""),
        );
    }
    add(
        "GET missing bucket ?versioning",
        req(Method::GET, "")
            .q("versioning", "")
            .in_bucket("no-such-bucket-x1"),
    );
    v
}

/// Origin, node and gateway for one origin endpoint; runs every case and returns
/// how many answers were compared.
/// How far an origin may stray from S3: moto neither checks signatures nor keeps
/// every rule S3 documents; shoal's own test origin must keep them all.
#[derive(Clone, Copy, PartialEq)]
enum Origin {
    HeldToS3,
    Lenient,
}

/// The origin as a target, with the test's bucket made on it.
async fn origin_with_bucket(
    http: &reqwest::Client,
    endpoint: &str,
    access: &str,
    secret: &str,
) -> Target {
    let origin = Target {
        name: "origin",
        endpoint: endpoint.to_owned(),
        access: access.to_owned(),
        secret: secret.to_owned(),
    };
    send(
        http,
        &origin,
        BUCKET,
        &req(Method::PUT, ""),
        Signing::Proper,
    )
    .await;
    origin
}

async fn suite(endpoint: &str, access: &str, secret: &str, kind: Origin) -> usize {
    let http = reqwest::Client::new();
    let bucket = BUCKET;
    // The bucket (moto starts with none), then the objects.
    let origin = origin_with_bucket(&http, endpoint, access, secret).await;
    let mut etag = String::new();
    for (key, body) in objects() {
        let mut r = req(Method::PUT, &key);
        r.body = body;
        if key == "plain.txt" {
            for (k, v) in STORED {
                r = r.h(k, v);
            }
        }
        let a = send(&http, &origin, bucket, &r, Signing::Proper).await;
        assert_eq!(a.status, 200, "PUT {key:?}: {a:?}");
        if key == "plain.txt" {
            etag = a.headers["etag"].trim_matches('"').to_owned();
        }
    }
    let client =
        S3Client::new(client_options(endpoint, "us-east-1", access, secret, true)).unwrap();
    let id = client
        .create_multipart_upload(bucket, "multi.bin")
        .await
        .unwrap();
    let p1 = client
        .upload_part(bucket, "multi.bin", &id, 1, data(5 * MIB, 20))
        .await
        .unwrap();
    let p2 = client
        .upload_part(bucket, "multi.bin", &id, 2, data(100, 21))
        .await
        .unwrap();
    client
        .complete_multipart_upload(bucket, "multi.bin", &id, &[(1, p1), (2, p2)])
        .await
        .unwrap();

    let origin_section = origin_section(endpoint, access, secret);
    let node = start_node(&parse(&node_section(&origin_section, "", ""))).await;
    let owners = [
        start_node(&parse(&node_section(&origin_section, "", ""))).await,
        start_node(&parse(&node_section(&origin_section, "", ""))).await,
    ];
    let ids: Vec<String> = owners.iter().map(|n| n.addr.to_string()).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let gateway = start_node(&parse(&node_section(
        &origin_section,
        "",
        &cluster_toml(&ids, ""),
    )))
    .await;
    let through = |name, addr: std::net::SocketAddr| Target {
        name,
        endpoint: format!("http://{addr}"),
        access: NODE_KEY.into(),
        secret: NODE_SECRET.into(),
    };
    let targets = [through("node", node.addr), through("gateway", gateway.addr)];

    let mut compared = 0;
    let mut wrong = Vec::new();
    let mut deviations = Vec::new();
    let mut cases = cases(&etag);
    // A continuation token is the origin's to make: take it from its first page.
    let first = send(
        &http,
        &origin,
        bucket,
        &req(Method::GET, "")
            .q("list-type", "2")
            .q("prefix", "list/")
            .q("max-keys", "2"),
        Signing::Proper,
    )
    .await;
    let body = String::from_utf8_lossy(&first.body).into_owned();
    let token = body
        .split_once("<NextContinuationToken>")
        .and_then(|(_, r)| r.split_once("</NextContinuationToken>"))
        .map(|(t, _)| t.to_owned())
        .expect("a truncated first page");
    cases.push((
        "V2 continuation".into(),
        req(Method::GET, "")
            .q("list-type", "2")
            .q("prefix", "list/")
            .q("max-keys", "2")
            .q("continuation-token", &token),
    ));
    for (what, r) in &cases {
        // Twice through each target: cold, then warm (blocks and versions cached).
        let want = send(&http, &origin, bucket, r, Signing::Proper).await;
        // An origin that strays from S3 is not copied: the node answers as S3 does.
        let strays = r.short_of_s3(&want);
        if let Some(how) = &strays {
            match kind {
                Origin::HeldToS3 => wrong.push(format!("{what} (origin): {how}")),
                Origin::Lenient => deviations.push(format!("{what}: {how}")),
            }
        }
        for t in &targets {
            for pass in ["cold", "warm"] {
                let got = send(&http, t, bucket, r, Signing::Proper).await;
                compared += 1;
                let d = match &strays {
                    Some(_) => r.short_of_s3(&got).into_iter().collect(),
                    None => differences(&want, &got, &r.method),
                };
                if !d.is_empty() {
                    wrong.push(format!("{what} ({} {pass}): {}", t.name, d.join("; ")));
                }
            }
        }
    }
    // The origin itself, as S3 documents it.
    let all = send(
        &http,
        &origin,
        bucket,
        &req(Method::GET, "")
            .q("list-type", "2")
            .q("encoding-type", "url"),
        Signing::Proper,
    )
    .await;
    let mut stored: Vec<String> = objects().into_iter().map(|(k, _)| k).collect();
    stored.push("multi.bin".into());
    stored.sort();
    let mut keys = listed_keys(&all.body);
    keys.sort();
    assert_eq!(
        keys, stored,
        "the origin's encoded listing decodes to the stored keys"
    );
    let zero = send(
        &http,
        &origin,
        bucket,
        &req(Method::GET, "").q("list-type", "2").q("max-keys", "0"),
        Signing::Proper,
    )
    .await;
    assert!(
        String::from_utf8_lossy(&zero.body).contains("<IsTruncated>false</IsTruncated>"),
        "max-keys=0 is not truncated"
    );
    // Authentication: the node's own keys, answered as S3 answers.
    let mut auth_targets: Vec<&Target> = targets.iter().collect();
    if kind == Origin::HeldToS3 {
        auth_targets.push(&origin);
    }
    for (how, code) in [
        (Signing::UnknownKey, "InvalidAccessKeyId"),
        (Signing::WrongSecret, "SignatureDoesNotMatch"),
        (Signing::Skewed, "RequestTimeTooSkewed"),
        (Signing::Anonymous, "AccessDenied"),
    ] {
        for t in &auth_targets {
            for r in [
                req(Method::GET, "plain.txt"),
                req(Method::GET, "").q("list-type", "2"),
            ] {
                let got = send(&http, t, bucket, &r, how).await;
                compared += 1;
                if got.status != 403 || got.code().as_deref() != Some(code) {
                    wrong.push(format!(
                        "{how:?} {} {:?} ({}): {} {:?}, S3 says 403 {code}",
                        r.method,
                        r.key,
                        t.name,
                        got.status,
                        got.code()
                    ));
                }
            }
        }
    }
    drop((node, owners, gateway));
    if !deviations.is_empty() {
        eprintln!(
            "where this origin strays from S3 (the node answered as S3 does):\n  {}",
            deviations.join("\n  ")
        );
    }
    assert!(
        wrong.is_empty(),
        "{} of {compared} answers differ from the origin's:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    compared
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_answers_as_the_test_origin_does() {
    let o = crate::common::origin().await;
    let n = suite(
        &o.endpoint(),
        &o.options.access_key,
        &o.options.secret_key,
        Origin::HeldToS3,
    )
    .await;
    eprintln!("conformance against the test origin: {n} answers compared, all alike");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_answers_as_moto_does() {
    let moto = Moto::start();
    // moto takes any key and checks no signature (its IAM mode is off), so its own
    // auth answers are not S3's to compare with; the node's are still checked.
    let n = suite(&moto.endpoint, "moto-key", "moto-secret", Origin::Lenient).await;
    eprintln!("conformance against moto: {n} answers compared, all alike");
}

/// One write of the write suite: built for a destination key, with the statuses
/// it may have.
struct Write {
    what: &'static str,
    /// The destination exists (an older version, read through every node first).
    existing: bool,
    build: BuildWrite,
}

/// A write's request for a destination key and the ETag it has there (if any).
type BuildWrite = Box<dyn Fn(&str, &str) -> Req>;

/// A PUT of a few bytes with condition `name`: `value`, or the destination's own
/// ETag for `None`.
fn put_if(name: &'static str, value: Option<&'static str>) -> BuildWrite {
    Box::new(move |dest: &str, etag: &str| {
        let mut r = req(Method::PUT, dest).h(name, value.unwrap_or(etag));
        r.body = Bytes::from_static(b"conditional");
        r
    })
}

/// Writes through a gateway with writes on, against the same writes straight to
/// the origin: CopyObject (plain, conditional, with its metadata directive, of a
/// missing source), UploadPartCopy and conditional PUTs. Compared: status, error
/// code, the object each left (ETag, bytes, type, metadata), and the destination
/// read through every node once the write's invalidations are in.
async fn write_suite(endpoint: &str, access: &str, secret: &str) -> usize {
    let http = reqwest::Client::new();
    let bucket = BUCKET;
    let origin = origin_with_bucket(&http, endpoint, access, secret).await;
    let mut src = req(Method::PUT, "w/src");
    src.body = data(70_001, 40);
    src = src
        .h("content-type", "text/csv")
        .h("x-amz-meta-color", "green");
    let put = send(&http, &origin, bucket, &src, Signing::Proper).await;
    assert_eq!(put.status, 200, "{put:?}");
    let src_etag = put.headers["etag"].clone();

    let origin_section = origin_section(endpoint, access, secret);
    let owners = [
        start_node(&parse(&node_section(&origin_section, "", ""))).await,
        start_node(&parse(&node_section(&origin_section, "", ""))).await,
    ];
    let ids: Vec<String> = owners.iter().map(|n| n.addr.to_string()).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let gateway = start_node(&parse(&node_section(
        &origin_section,
        "",
        &format!("{}[gateway]\nwrites = true\n", cluster_toml(&ids, "")),
    )))
    .await;
    let gw = Target {
        name: "gateway",
        endpoint: format!("http://{}", gateway.addr),
        access: NODE_KEY.into(),
        secret: NODE_SECRET.into(),
    };
    let readers: Vec<std::net::SocketAddr> = owners
        .iter()
        .map(|n| n.addr)
        .chain([gateway.addr])
        .collect();

    let source = format!("/{bucket}/w/src");
    let copy = move |s: &str| {
        let source = source.clone();
        let s = s.to_owned();
        move |dest: &str, _: &str| {
            req(Method::PUT, dest)
                .h("x-amz-copy-source", &source)
                .h_opt(&s)
        }
    };
    let writes: Vec<Write> = vec![
        Write { what: "CopyObject", existing: true, build: Box::new(copy("")) },
        Write { what: "CopyObject onto a new key", existing: false, build: Box::new(copy("")) },
        Write {
            what: "CopyObject if-match right",
            existing: true,
            build: Box::new(copy(&format!("x-amz-copy-source-if-match={src_etag}"))),
        },
        Write {
            what: "CopyObject if-match wrong",
            existing: true,
            build: Box::new(copy("x-amz-copy-source-if-match=\"0123\"")),
        },
        Write {
            what: "CopyObject if-none-match the source",
            existing: true,
            build: Box::new(copy(&format!("x-amz-copy-source-if-none-match={src_etag}"))),
        },
        Write {
            what: "CopyObject if-unmodified-since past",
            existing: true,
            build: Box::new(copy("x-amz-copy-source-if-unmodified-since=Sat, 01 Jan 2000 00:00:00 GMT")),
        },
        Write {
            what: "CopyObject REPLACE",
            existing: true,
            build: Box::new(copy(
                "x-amz-metadata-directive=REPLACE;content-type=application/x-copied;x-amz-meta-color=violet",
            )),
        },
        Write {
            what: "CopyObject of a missing source",
            existing: true,
            build: Box::new(move |dest: &str, _: &str| {
                req(Method::PUT, dest).h("x-amz-copy-source", &format!("/{BUCKET}/w/none"))
            }),
        },
        Write {
            what: "PutObject if-none-match * over an object",
            existing: true,
            build: put_if("if-none-match", Some("*")),
        },
        Write {
            what: "PutObject if-none-match * onto a new key",
            existing: false,
            build: put_if("if-none-match", Some("*")),
        },
        Write {
            what: "PutObject if-match wrong",
            existing: true,
            build: put_if("if-match", Some("\"0123\"")),
        },
        Write {
            what: "PutObject if-match right",
            existing: true,
            build: put_if("if-match", None),
        },
    ];
    let mut wrong = Vec::new();
    let mut compared = 0;
    for (n, w) in writes.iter().enumerate() {
        let mut answers = Vec::new();
        for t in [&origin, &gw] {
            let dest = format!("w/{n}/{}", t.name);
            let mut old_etag = String::new();
            if w.existing {
                let mut r = req(Method::PUT, &dest);
                r.body = data(1000 + n, 50 + n as u64);
                let a = send(&http, &origin, bucket, &r, Signing::Proper).await;
                old_etag = a.headers["etag"].clone();
                // Every node holds the old version of the gateway's destination.
                for addr in readers.iter().filter(|_| t.name == "gateway") {
                    let got = client(*addr)
                        .get_bytes(&GetObject::new(bucket, &dest))
                        .await;
                    assert!(got.is_ok(), "{dest} through {addr}: {got:?}");
                }
            }
            let batches = metric(
                &scrape(gateway.addr).await,
                "shoal_node_fanout_batches_total{kind=\"ok\"}",
            );
            let a = send(
                &http,
                t,
                bucket,
                &(w.build)(&dest, &old_etag),
                Signing::Proper,
            )
            .await;
            if a.status == 200 && t.name == "gateway" {
                let want = batches + owners.len() as f64;
                wait_for(
                    "the write's invalidations",
                    Duration::from_secs(20),
                    || async {
                        metric(
                            &scrape(gateway.addr).await,
                            "shoal_node_fanout_batches_total{kind=\"ok\"}",
                        ) >= want
                    },
                )
                .await;
            }
            // What the write left at the origin, and what every node reads.
            let left = send(
                &http,
                &origin,
                bucket,
                &req(Method::GET, &dest),
                Signing::Proper,
            )
            .await;
            for addr in readers.iter().filter(|_| t.name == "gateway") {
                let through = client(*addr)
                    .get_bytes(&GetObject::new(bucket, &dest))
                    .await;
                let fresh = match (&through, left.status) {
                    (Ok((_, b)), 200) => *b == left.body,
                    (Err(_), 404) => true,
                    _ => false,
                };
                if !fresh {
                    wrong.push(format!(
                        "{} ({}): {dest} through {addr} is not the origin's",
                        w.what, t.name
                    ));
                }
            }
            answers.push((a, left));
        }
        compared += 1;
        let ((da, dl), (ga, gl)) = (&answers[0], &answers[1]);
        let mut d = Vec::new();
        if da.status != ga.status || da.code() != ga.code() {
            d.push(format!(
                "{} {:?} vs {} {:?}",
                da.status,
                da.code(),
                ga.status,
                ga.code()
            ));
        }
        for h in ["etag", "content-type", "x-amz-meta-color"] {
            if dl.headers.get(h) != gl.headers.get(h)
                && !(h == "etag" && !w.existing && dl.status != 200)
            {
                d.push(format!(
                    "afterwards {h}: {:?} vs {:?}",
                    dl.headers.get(h),
                    gl.headers.get(h)
                ));
            }
        }
        if dl.body != gl.body {
            d.push("afterwards the bytes differ".into());
        }
        if !d.is_empty() {
            wrong.push(format!("{}: {}", w.what, d.join("; ")));
        }
    }
    // UploadPartCopy: a part of an upload copied from the source, through each.
    let mut parts = Vec::new();
    for t in [&origin, &gw] {
        let dest = format!("w/part/{}", t.name);
        let c = S3Client::new(client_options(
            &t.endpoint,
            "us-east-1",
            &t.access,
            &t.secret,
            true,
        ))
        .unwrap();
        let id = c.create_multipart_upload(bucket, &dest).await.unwrap();
        let r = req(Method::PUT, &dest)
            .q("partNumber", "1")
            .q("uploadId", &id)
            .h("x-amz-copy-source", &format!("/{bucket}/w/src"));
        let a = send(&http, t, bucket, &r, Signing::Proper).await;
        let etag = String::from_utf8_lossy(&a.body)
            .split_once("<ETag>")
            .and_then(|(_, r)| r.split_once("</ETag>"))
            .map(|(e, _)| e.replace("&quot;", "\""));
        parts.push((a.status, a.code(), etag));
        let _ = c.abort_multipart_upload(bucket, &dest, &id).await;
    }
    compared += 1;
    eprintln!("UploadPartCopy direct and through the gateway: {parts:?}");
    if parts[0] != parts[1] {
        wrong.push(format!("UploadPartCopy: {:?} vs {:?}", parts[0], parts[1]));
    }
    assert!(
        wrong.is_empty(),
        "{} writes differ through the gateway:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    compared
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_writes_as_the_test_origin_does() {
    let o = crate::common::origin().await;
    let n = write_suite(&o.endpoint(), &o.options.access_key, &o.options.secret_key).await;
    eprintln!("writes against the test origin: {n} compared, all alike");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_writes_as_moto_does() {
    let moto = Moto::start();
    let n = write_suite(&moto.endpoint, "moto-key", "moto-secret").await;
    eprintln!("writes against moto: {n} compared, all alike");
}
