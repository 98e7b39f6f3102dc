//! Writes as S3 clients make them, through a gateway against straight to the
//! origin: a multipart upload with everything CreateMultipartUpload stores
//! (type, metadata, tagging, storage class), an upload completed that was never
//! created, a PUT sent `Transfer-Encoding: chunked` without a length, and, on a
//! versioned bucket, the version ids and delete markers of PUTs, DELETEs,
//! completions and multi-object deletes. Compared step by step: status, error
//! code, the headers the origin answered with (values where they do not name a
//! version, presence where they do), the object each left behind, and what every
//! node reads afterwards (a versioned read by its version).

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use shoal::store::GetObject;

use super::{origin_with_bucket, req, send, Answer, Req, Signing, Target, MIB};
use crate::common::*;

/// Answer headers compared by value.
const VALUES: &[&str] = &[
    "etag",
    "x-amz-delete-marker",
    "x-amz-checksum-crc32",
    "x-amz-server-side-encryption",
    "x-amz-storage-class",
    "x-amz-tagging-count",
    "content-type",
    "x-amz-meta-color",
    "cache-control",
    "content-disposition",
];

/// Answer headers compared by presence: they name one version or one request.
const PRESENT: &[&str] = &["x-amz-version-id", "x-amz-request-id"];

/// What CreateMultipartUpload asks the object be stored with.
const CREATE: &[(&str, &str)] = &[
    ("content-type", "text/bla"),
    ("x-amz-meta-color", "violet"),
    ("cache-control", "max-age=7"),
    ("content-disposition", "attachment; filename=\"up.bin\""),
    ("x-amz-tagging", "team=blue&tier=2"),
    ("x-amz-storage-class", "STANDARD_IA"),
];

/// A `<Tag>value</Tag>` of an XML answer.
fn element(body: &[u8], tag: &str) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let (_, rest) = text.split_once(&format!("<{tag}>"))?;
    let (v, _) = rest.split_once(&format!("</{tag}>"))?;
    Some(v.replace("&quot;", "\""))
}

/// How many `<Tag>` elements an XML answer has.
fn count(body: &[u8], tag: &str) -> usize {
    String::from_utf8_lossy(body)
        .matches(&format!("<{tag}>"))
        .count()
}

/// One step's answer, reduced to what is compared.
#[derive(Debug, PartialEq)]
struct Seen {
    status: u16,
    code: Option<String>,
    values: BTreeMap<&'static str, String>,
    present: Vec<&'static str>,
    /// What the answer's XML body says that is compared (e.g. the number of
    /// versions a multi-object delete names).
    body: Vec<String>,
}

fn seen(a: &Answer, body: Vec<String>) -> Seen {
    Seen {
        status: a.status,
        code: a.code(),
        values: VALUES
            .iter()
            .filter_map(|h| Some((*h, a.headers.get(*h)?.clone())))
            .collect(),
        present: PRESENT
            .iter()
            .copied()
            .filter(|h| a.headers.contains_key(*h))
            .collect(),
        body,
    }
}

/// What one target's run of the steps saw, step by step, and the keys it wrote.
struct Run {
    steps: Vec<(String, Seen)>,
}

impl Run {
    fn note(&mut self, what: &str, a: &Answer, body: Vec<String>) {
        self.steps.push((what.to_owned(), seen(a, body)));
    }
}

/// Every step, straight to `t` (the origin or the gateway); keys under `u/{name}/`.
async fn steps(
    http: &reqwest::Client,
    t: &Target,
    origin: &Target,
    versioned: bool,
    readers: &[std::net::SocketAddr],
    wrong: &mut Vec<String>,
) -> Run {
    let bucket = BUCKET;
    let mut run = Run { steps: vec![] };
    let base = format!("u/{}", t.name);

    // A multipart upload over an object every node holds.
    let dest = format!("{base}/multipart");
    let mut old = req(Method::PUT, &dest);
    old.body = data(1000, 1);
    send(http, origin, bucket, &old, Signing::Proper).await;
    warm(bucket, &dest, readers, t, wrong).await;
    let mut create = req(Method::POST, &dest).q("uploads", "");
    for (k, v) in CREATE {
        create = create.h(k, v);
    }
    let a = send(http, t, bucket, &create, Signing::Proper).await;
    run.note("CreateMultipartUpload", &a, vec![]);
    let id = element(&a.body, "UploadId").unwrap_or_default();
    let mut etags = Vec::new();
    for (n, len) in [(1, 5 * MIB), (2, 1000)] {
        let mut part = req(Method::PUT, &dest)
            .q("partNumber", &n.to_string())
            .q("uploadId", &id);
        part.body = data(len, 10 + n as u64);
        let a = send(http, t, bucket, &part, Signing::Proper).await;
        run.note(&format!("UploadPart {n}"), &a, vec![]);
        etags.push(a.headers.get("etag").cloned().unwrap_or_default());
    }
    let mut complete = req(Method::POST, &dest).q("uploadId", &id);
    complete.body = Bytes::from(format!(
        "<CompleteMultipartUpload>{}</CompleteMultipartUpload>",
        etags
            .iter()
            .enumerate()
            .map(|(i, e)| format!(
                "<Part><PartNumber>{}</PartNumber><ETag>{e}</ETag></Part>",
                i + 1
            ))
            .collect::<String>()
    ));
    let a = send(http, t, bucket, &complete, Signing::Proper).await;
    run.note(
        "CompleteMultipartUpload",
        &a,
        vec![element(&a.body, "ETag").unwrap_or_default()],
    );
    left(http, origin, bucket, &dest, readers, t, &mut run, wrong).await;

    // An upload never created: the origin's own 404 NoSuchUpload.
    let mut none = req(Method::POST, &format!("{base}/none")).q("uploadId", "no-such-upload");
    none.body = Bytes::from_static(
        b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber>\
          <ETag>\"d41d8cd98f00b204e9800998ecf8427e\"</ETag></Part></CompleteMultipartUpload>",
    );
    let a = send(http, t, bucket, &none, Signing::Proper).await;
    run.note("CompleteMultipartUpload of no upload", &a, vec![]);

    // A PUT in HTTP chunks, with no Content-Length.
    let chunked_key = format!("{base}/chunked");
    let mut put = req(Method::PUT, &chunked_key).h("content-type", "text/chunked");
    put.body = data(300_000, 3);
    put.chunked = true;
    let a = send(http, t, bucket, &put, Signing::Proper).await;
    run.note("PutObject chunked", &a, vec![]);
    left(
        http,
        origin,
        bucket,
        &chunked_key,
        readers,
        t,
        &mut run,
        wrong,
    )
    .await;

    // A PUT with its checksum.
    let mut put = req(Method::PUT, &format!("{base}/checked"))
        .h("x-amz-checksum-crc32", "6X2lsQ==")
        .h("x-amz-sdk-checksum-algorithm", "CRC32");
    put.body = Bytes::from_static(b"checked");
    let a = send(http, t, bucket, &put, Signing::Proper).await;
    run.note("PutObject with x-amz-checksum-crc32", &a, vec![]);

    if !versioned {
        return run;
    }
    // Versions: two PUTs, a read of the first by its id, a delete (a marker), a
    // delete of one version, and a multi-object delete naming versions.
    let key = format!("{base}/versioned");
    let mut ids = Vec::new();
    for n in 0..2 {
        let mut put = req(Method::PUT, &key);
        put.body = data(2000 + n, 20 + n as u64);
        let a = send(http, t, bucket, &put, Signing::Proper).await;
        run.note(&format!("PutObject version {n}"), &a, vec![]);
        ids.push(
            a.headers
                .get("x-amz-version-id")
                .cloned()
                .unwrap_or_default(),
        );
    }
    left(http, origin, bucket, &key, readers, t, &mut run, wrong).await;
    for addr in readers.iter().filter(|_| t.name == "gateway") {
        let first = node_get(*addr, bucket, &key, Some(&ids[0])).await;
        if first.as_deref() != Ok(&data(2000, 20)[..]) {
            wrong.push(format!(
                "{key}?versionId={} through {addr} is not its version",
                ids[0]
            ));
        }
    }
    let a = send(http, t, bucket, &req(Method::DELETE, &key), Signing::Proper).await;
    run.note("DeleteObject (a delete marker)", &a, vec![]);
    left(http, origin, bucket, &key, readers, t, &mut run, wrong).await;
    let a = send(
        http,
        t,
        bucket,
        &req(Method::DELETE, &key).q("versionId", &ids[1]),
        Signing::Proper,
    )
    .await;
    run.note("DeleteObject of a version", &a, vec![]);
    if a.headers.get("x-amz-version-id") != Some(&ids[1]) {
        wrong.push(format!(
            "DeleteObject of version {} ({}): answered version {:?}",
            ids[1],
            t.name,
            a.headers.get("x-amz-version-id")
        ));
    }
    let mut many = req(Method::POST, "").q("delete", "");
    many.body = Bytes::from(format!(
        "<Delete><Object><Key>{key}</Key><VersionId>{}</VersionId></Object>\
         <Object><Key>{base}/checked</Key></Object></Delete>",
        ids[0]
    ));
    let md5 = base64_md5(&many.body);
    let many = many.h("content-md5", &md5);
    let a = send(http, t, bucket, &many, Signing::Proper).await;
    run.note(
        "DeleteObjects with versions",
        &a,
        vec![
            format!("{} deleted", count(&a.body, "Deleted")),
            format!("{} version ids", count(&a.body, "VersionId")),
            format!("{} delete markers", count(&a.body, "DeleteMarker")),
        ],
    );
    left(http, origin, bucket, &key, readers, t, &mut run, wrong).await;
    run
}

fn base64_md5(b: &[u8]) -> String {
    use base64::Engine;
    use md5::Digest;
    base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(b))
}

/// Reads `key` through every node (the gateway's run only), so each holds it.
async fn warm(
    bucket: &str,
    key: &str,
    readers: &[std::net::SocketAddr],
    t: &Target,
    wrong: &mut Vec<String>,
) {
    for addr in readers.iter().filter(|_| t.name == "gateway") {
        if let Err(e) = client(*addr).get_bytes(&GetObject::new(bucket, key)).await {
            wrong.push(format!("{key} through {addr} before the write: {e}"));
        }
    }
}

/// A node's answer to a GET of `key` (of its `version`), as bytes.
async fn node_get(
    addr: std::net::SocketAddr,
    bucket: &str,
    key: &str,
    version: Option<&str>,
) -> Result<Bytes, u16> {
    let mut r = req(Method::GET, key);
    if let Some(v) = version {
        r = r.q("versionId", v);
    }
    let node = Target {
        name: "node",
        endpoint: format!("http://{addr}"),
        access: NODE_KEY.into(),
        secret: NODE_SECRET.into(),
    };
    let a = send(&reqwest::Client::new(), &node, bucket, &r, Signing::Proper).await;
    if a.status == 200 {
        Ok(a.body)
    } else {
        Err(a.status)
    }
}

/// What a write left at the origin (noted as a step) and whether every node
/// reads the same (the gateway's run).
#[allow(clippy::too_many_arguments)]
async fn left(
    http: &reqwest::Client,
    origin: &Target,
    bucket: &str,
    key: &str,
    readers: &[std::net::SocketAddr],
    t: &Target,
    run: &mut Run,
    wrong: &mut Vec<String>,
) {
    let a = send(
        http,
        origin,
        bucket,
        &req(Method::GET, key),
        Signing::Proper,
    )
    .await;
    let tagging = send(
        http,
        origin,
        bucket,
        &req(Method::GET, key).q("tagging", ""),
        Signing::Proper,
    )
    .await;
    // (An error's body names the key, which differs between the runs.)
    let mut body = vec![];
    if a.status == 200 {
        body.push(format!("{} bytes", a.body.len()));
        body.push(format!("{} tags", count(&tagging.body, "Tag")));
    }
    run.note(
        &format!("afterwards, {}", key.rsplit('/').next().unwrap_or(key)),
        &a,
        body,
    );
    // Every node reads what the origin has once the write's invalidations are in.
    for addr in readers.iter().filter(|_| t.name == "gateway") {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let through = node_get(*addr, bucket, key, None).await;
            let fresh = match (&through, a.status) {
                (Ok(b), 200) => *b == a.body,
                (Err(404), 404) => true,
                _ => false,
            };
            if fresh {
                break;
            }
            if std::time::Instant::now() > deadline {
                wrong.push(format!(
                    "{key} through {addr} is not the origin's ({} bytes there): {:?}",
                    a.body.len(),
                    through.map(|b| b.len())
                ));
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The steps straight to the origin and through a gateway (two owner nodes
/// behind it), compared. `versioned`: the origin keeps versions.
pub async fn upload_suite(endpoint: &str, access: &str, secret: &str, versioned: bool) -> usize {
    // A fresh connection for every request: a server that answers a step
    // before reading its whole body (a refused chunked upload) closes the
    // connection after the answer, and a pooled connection taken by the next
    // step in that instant fails to send ("error sending request"), which is
    // not what the steps compare.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let origin = origin_with_bucket(&http, endpoint, access, secret).await;
    if versioned {
        let mut v = req(Method::PUT, "").q("versioning", "");
        v.body = Bytes::from_static(
            b"<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>",
        );
        let a = send(&http, &origin, BUCKET, &v, Signing::Proper).await;
        assert_eq!(a.status, 200, "versioning on: {a:?}");
    }
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
    let mut wrong = Vec::new();
    let direct = steps(&http, &origin, &origin, versioned, &readers, &mut wrong).await;
    let through = steps(&http, &gw, &origin, versioned, &readers, &mut wrong).await;
    assert_eq!(direct.steps.len(), through.steps.len());
    for ((what, d), (_, g)) in direct.steps.iter().zip(&through.steps) {
        eprintln!("{what}: direct {d:?}");
        // The test origin refuses a PUT without a length (411), which S3 and
        // moto take; a gateway takes it as S3 does, sending the origin a length.
        let refused_lengthless = what.contains("chunked")
            && matches!(
                d.code.as_deref(),
                Some("MissingContentLength" | "NoSuchKey")
            );
        if refused_lengthless {
            if g.status != 200 {
                wrong.push(format!(
                    "{what}: the gateway did not take it as S3 does: {g:?}"
                ));
            }
            continue;
        }
        if d != g {
            wrong.push(format!("{what}:\n    direct  {d:?}\n    gateway {g:?}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} differences through the gateway:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    direct.steps.len()
}

/// `r` as HTTP chunks of 64 KiB (no Content-Length).
pub fn chunked_body(r: &Req) -> reqwest::Body {
    let chunks: Vec<Result<Bytes, std::io::Error>> = r
        .body
        .chunks(64 << 10)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    reqwest::Body::wrap_stream(futures_util::stream::iter(chunks))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_through_a_gateway_as_the_test_origin_takes_them() {
    let o = crate::common::origin().await;
    let n = upload_suite(
        &o.endpoint(),
        &o.options.access_key,
        &o.options.secret_key,
        false,
    )
    .await;
    eprintln!("uploads against the test origin: {n} steps compared, all alike");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_through_a_gateway_as_moto_takes_them_versioned() {
    let moto = Moto::start();
    let n = upload_suite(&moto.endpoint, "moto-key", "moto-secret", true).await;
    eprintln!("uploads against moto, versioned: {n} steps compared, all alike");
}
