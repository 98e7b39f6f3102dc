//! What the node does not cache, passed through to the origin as it was asked
//! (re-signed with the node's origin credentials) and answered as the origin
//! answered, status, headers and body: keys the rules leave uncached (counted in
//! `shoal_node_uncached_requests_total`), object reads the node has no blocks for
//! (`partNumber`, `versionId`), and listings and bucket reads ([`super::lists`]).

use std::sync::Arc;

use futures_util::TryStreamExt;
use http::Method;
use s3s::{S3Request, S3Response, S3Result};

use shoal::store::s3::S3Client;
use shoal::store::ObjectStore;

use super::error::store_error;
pub use super::query::query_pairs;
use crate::access::trace::Outcome;
use crate::node::{Answer, Node, SyncStream, OWN_HEADERS};

/// Client headers that change what the origin answers, passed on with a request.
const PASSED_HEADERS: &[&str] = &[
    "range",
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
    "x-amz-request-payer",
    "x-amz-expected-bucket-owner",
    "x-amz-checksum-mode",
    "x-amz-server-side-encryption-customer-algorithm",
    "x-amz-server-side-encryption-customer-key",
    "x-amz-server-side-encryption-customer-key-md5",
    // GetObjectAttributes and ListParts.
    "x-amz-object-attributes",
    "x-amz-max-parts",
    "x-amz-part-number-marker",
];

/// Object-read query parameters the node has no blocks for.
const UNCACHED_QUERY: &[&str] = &[
    "partNumber",
    "versionId",
    // Reads of what is said about an object rather than its bytes
    // (GetObjectAttributes, GetObjectAcl, GetObjectTagging, retention and legal
    // hold, ListParts): the origin's answer, verbatim.
    "attributes",
    "acl",
    "tagging",
    "retention",
    "legal-hold",
    "torrent",
    "uploadId",
];

/// The client headers of `headers` that go on to the origin with a request.
pub fn passed_headers(headers: &http::HeaderMap) -> Vec<(&'static str, String)> {
    PASSED_HEADERS
        .iter()
        .filter_map(|h| Some((*h, headers.get(*h)?.to_str().ok()?.to_owned())))
        .collect()
}

/// The headers of an origin answer a proxy copies.
fn answer_headers(
    h: &http::HeaderMap,
) -> impl Iterator<Item = (&http::HeaderName, &http::HeaderValue)> {
    h.iter()
        .filter(|(name, _)| !OWN_HEADERS.contains(&name.as_str()))
}

/// Passes `req` on to the origin as `bucket/key` and hands back its answer.
pub async fn forward(
    origin: &S3Client,
    req: &S3Request<s3s::Body>,
    bucket: &str,
    key: &str,
) -> S3Result<S3Response<s3s::Body>> {
    let passed = passed_headers(&req.headers);
    let answer = origin
        .forward(
            req.method.clone(),
            bucket,
            key,
            query_pairs(&req.uri),
            passed,
        )
        .await
        .map_err(store_error)?;
    Ok(streamed(answer))
}

/// The origin's answer as the client's: status, headers a proxy copies, the body
/// as it streams.
pub fn streamed(answer: shoal::store::s3::Forwarded) -> S3Response<s3s::Body> {
    let body = SyncStream::new(answer.body.map_err(std::io::Error::other));
    let mut resp = S3Response::new(s3s::Body::from(s3s::dto::StreamingBlob::wrap(body)));
    resp.status = http::StatusCode::from_u16(answer.status).ok();
    for (name, value) in answer_headers(&answer.headers) {
        resp.headers.insert(name.clone(), value.clone());
    }
    resp
}

/// The most of a small answer (a listing page) held whole: S3 pages are a few
/// hundred KiB at most.
const WHOLE_LIMIT: usize = 16 << 20;

/// A bucket-level GET passed on to the origin, its answer read whole.
pub async fn fetch_whole(
    origin: &S3Client,
    bucket: &str,
    query: Vec<(String, String)>,
    passed: Vec<(&'static str, String)>,
) -> Result<Answer, shoal::store::StoreError> {
    let mut got = origin
        .forward(Method::GET, bucket, "", query, passed)
        .await?;
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = got.body.try_next().await? {
        if body.len() + chunk.len() > WHOLE_LIMIT {
            return Err(shoal::store::StoreError::Protocol {
                endpoint: origin.name().to_owned(),
                message: format!("a listing answer over {WHOLE_LIMIT} bytes"),
            });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Answer {
        status: got.status,
        headers: answer_headers(&got.headers)
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect(),
        body: body.freeze(),
    })
}

/// A held answer, as it came, `age_secs` old (an `Age` header when kept).
pub fn respond(answer: &Answer, age: Option<u64>) -> S3Response<s3s::Body> {
    let mut resp = S3Response::new(s3s::Body::from(answer.body.clone()));
    resp.status = http::StatusCode::from_u16(answer.status).ok();
    for (name, value) in &answer.headers {
        resp.headers.insert(name.clone(), value.clone());
    }
    if let Some(a) = age {
        resp.headers
            .insert(http::header::AGE, http::HeaderValue::from(a));
    }
    resp
}

/// The bucket and key a request addresses (`""` for the bucket itself, both `""`
/// for the service): from a virtual host under one of `domains`, else the path.
pub fn address(
    uri: &http::Uri,
    headers: &http::HeaderMap,
    domains: &[String],
) -> Option<(String, String)> {
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8()
            .ok()
            .map(|s| s.into_owned())
    };
    let path = uri.path().strip_prefix('/')?;
    let host = headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(|h| {
            h.rsplit_once(':')
                .map_or(h, |(h, _)| h)
                .to_ascii_lowercase()
        });
    let vh = host.and_then(|h| {
        domains.iter().find_map(|d| {
            h.strip_suffix(d.as_str())
                .and_then(|b| b.strip_suffix('.'))
                .map(str::to_owned)
        })
    });
    match vh {
        Some(bucket) => Some((bucket, decode(path)?)),
        None => {
            let (b, k) = path.split_once('/').unwrap_or((path, ""));
            Some((decode(b)?, decode(k)?))
        }
    }
}

/// Anonymous requests only where authentication is off.
pub fn signed_or_open(open: bool, req: &S3Request<s3s::Body>) -> S3Result<()> {
    if open || req.credentials.is_some() {
        Ok(())
    } else {
        Err(s3s::s3_error!(AccessDenied, "Access Denied"))
    }
}

/// Object GETs and HEADs passed through.
pub struct ObjectRoute {
    pub node: Arc<Node>,
    /// Where uncached objects are read: the origin, with the node's credentials.
    pub origin: S3Client,
    pub open: bool,
    /// Base domains of virtual-hosted requests (`bucket.DOMAIN/key`).
    pub domains: Vec<String>,
}

impl ObjectRoute {
    fn object(&self, uri: &http::Uri, headers: &http::HeaderMap) -> Option<(String, String)> {
        address(uri, headers, &self.domains).filter(|(b, k)| !b.is_empty() && !k.is_empty())
    }

    /// Whether the node passes this object read through rather than serving it.
    fn passes(&self, method: &Method, uri: &http::Uri, headers: &http::HeaderMap) -> bool {
        if method != Method::GET && method != Method::HEAD {
            return false;
        }
        let Some((bucket, key)) = self.object(uri, headers) else {
            return false;
        };
        if shoal::store::s3::key_problem(&key).is_some() {
            // Refused by the S3 layer with its own error.
            return false;
        }
        let uncached_query = query_pairs(uri)
            .iter()
            .any(|(k, _)| UNCACHED_QUERY.contains(&k.as_str()));
        uncached_query || !self.node.policy(&bucket, &key).cache
    }
}

#[async_trait::async_trait]
impl s3s::route::S3Route for ObjectRoute {
    fn is_match(
        &self,
        method: &Method,
        uri: &http::Uri,
        headers: &http::HeaderMap,
        _: &mut http::Extensions,
    ) -> bool {
        self.passes(method, uri, headers)
    }

    async fn check_access(&self, req: &mut S3Request<s3s::Body>) -> S3Result<()> {
        signed_or_open(self.open, req)
    }

    async fn call(&self, req: S3Request<s3s::Body>) -> S3Result<S3Response<s3s::Body>> {
        if super::error::cached_only(&req.headers) {
            return Err(super::error::not_cached(&req.headers));
        }
        self.node.metrics.uncached_requests.inc();
        self.node.metrics.origin_request("object");
        let (bucket, key) = self.object(&req.uri, &req.headers).unwrap_or_default();
        let mut resp = forward(&self.origin, &req, &bucket, &key).await?;
        self.node.metrics.cache_outcome(Outcome::Bypass);
        resp.headers.insert(
            super::objects::CACHE_STATUS,
            http::HeaderValue::from_static("shoal; fwd=bypass"),
        );
        Ok(resp)
    }
}
