//! Every write a gateway (`[gateway] writes = true`) takes, passed on to the
//! origin as the client asked it: PUT, the steps of a multipart upload, CopyObject
//! and UploadPartCopy, DeleteObject and DeleteObjects, bucket writes (CreateBucket,
//! DeleteBucket, a PUT or DELETE of a bucket subresource) and the subresource
//! writes of an object (ACL, tagging, retention, legal hold). Each goes with every
//! header the client sent except those of its own request ([`OWN`]: its
//! signature, its framing), signed with the gateway's origin credentials, sent
//! once; the origin's answer is the client's, status, headers and body. Uploads
//! stream through as they arrive. What the write changed is then dropped on every
//! node ([`super::writes`]).

use bytes::{Bytes, BytesMut};
use futures_util::TryStreamExt;
use http::Method;
use s3s::{s3_error, S3Request, S3Response, S3Result};
use shoal::node_proto::Purge;
use shoal::store::s3::Forwarded;

use super::error::store_error;
use super::passthrough::{address, signed_or_open, streamed};
use super::query::query_pairs;
use super::writes::{Writes, MAX_HELD};

/// Object subresources whose writes pass through.
const OBJECT_SUBRESOURCES: &[&str] = &["acl", "tagging", "retention", "legal-hold"];

/// Request headers that belong to the client's own request (its signature, its
/// framing), never passed on: the gateway signs its own request and frames its
/// own body. The checksum an aws-chunked body carries after it (`x-amz-trailer`)
/// goes on as a header instead.
pub const OWN: &[&str] = &[
    "authorization",
    "host",
    "content-length",
    "connection",
    "transfer-encoding",
    "expect",
    "user-agent",
    "accept-encoding",
    "x-amz-date",
    "x-amz-content-sha256",
    "x-amz-security-token",
    "x-amz-decoded-content-length",
    "x-amz-trailer",
];

/// Query parameters of a presigned request's own signature (SigV4, SigV2):
/// the gateway's request carries its own.
const OWN_QUERY: &[&str] = &[
    "x-amz-algorithm",
    "x-amz-credential",
    "x-amz-date",
    "x-amz-expires",
    "x-amz-signedheaders",
    "x-amz-signature",
    "x-amz-security-token",
    "awsaccesskeyid",
    "signature",
    "expires",
];

/// The query of `uri` as the origin is to get it: the client's, less its own
/// signature's.
fn passed_query(uri: &http::Uri) -> Vec<(String, String)> {
    query_pairs(uri)
        .into_iter()
        .filter(|(k, _)| !OWN_QUERY.contains(&k.to_ascii_lowercase().as_str()))
        .collect()
}

/// The largest body of a write that is not an upload: a DeleteObjects of 1,000
/// long keys, a CompleteMultipartUpload of 10,000 parts, a bucket document.
const MAX_BODY: usize = 4 << 20;

pub struct WriteRoute {
    pub writes: Writes,
    /// Base domains of virtual-hosted requests (`bucket.DOMAIN/key`).
    pub domains: Vec<String>,
}

pub use crate::access::write_kind::Kind;

/// Which write a request is, from its method, address, query and headers.
pub fn kind(
    method: &Method,
    uri: &http::Uri,
    headers: &http::HeaderMap,
    domains: &[String],
) -> Option<Kind> {
    if method != Method::PUT && method != Method::DELETE && method != Method::POST {
        return None;
    }
    let (bucket, key) = address(uri, headers, domains)?;
    if bucket.is_empty() {
        return None;
    }
    let query = query_pairs(uri);
    let has = |name: &str| query.iter().any(|(k, _)| k == name);
    if key.is_empty() {
        return match *method {
            Method::POST if has("delete") => Some(Kind::DeleteMany),
            // A browser's form upload: the S3 layer's to refuse.
            Method::POST => None,
            _ => Some(Kind::Bucket),
        };
    }
    if OBJECT_SUBRESOURCES.iter().any(|s| has(s)) {
        return Some(Kind::ObjectSubresource);
    }
    Some(match *method {
        Method::PUT if headers.contains_key("x-amz-copy-source") => {
            if has("uploadId") {
                Kind::PartCopy
            } else {
                Kind::Copy
            }
        }
        Method::PUT if has("uploadId") => Kind::Part,
        Method::PUT => Kind::Put,
        Method::DELETE if has("uploadId") => Kind::Abort,
        Method::DELETE => Kind::Delete,
        Method::POST if has("uploads") => Kind::Create,
        Method::POST if has("uploadId") => Kind::Complete,
        // RestoreObject and the like: passed on as they are.
        _ => Kind::ObjectSubresource,
    })
}

/// The client's headers that say what the write is, as they came.
fn passed(headers: &http::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| !OWN.contains(&name.as_str()))
        .filter(|(name, value)| {
            // A body the S3 layer already decoded from aws-chunked is plain now.
            !(name.as_str() == "content-encoding" && value.as_bytes() == b"aws-chunked")
        })
        .filter_map(|(name, value)| {
            Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
        })
        .collect()
}

/// A body read whole, at most `limit` bytes.
async fn held(body: s3s::Body, limit: usize) -> S3Result<Bytes> {
    let mut buf = BytesMut::new();
    let mut stream = body;
    while let Some(chunk) = stream
        .try_next()
        .await
        .map_err(|e| s3_error!(IncompleteBody, "request body: {e}"))?
    {
        if buf.len() + chunk.len() > limit {
            return Err(s3_error!(
                EntityTooLarge,
                "a body a gateway must hold whole is at most {limit} bytes"
            ));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// The keys a DeleteObjects body names (for its access check and what it drops).
pub fn deleted_keys(body: &[u8]) -> S3Result<Vec<String>> {
    use s3s::xml::Deserialize;
    let mut d = s3s::xml::Deserializer::new(body);
    let delete = s3s::dto::Delete::deserialize(&mut d)
        .map_err(|e| s3_error!(MalformedXML, "DeleteObjects body: {e}"))?;
    Ok(delete.objects.into_iter().map(|o| o.key).collect())
}

/// The ETag an answer names in its header, unquoted.
fn etag(answer: &Forwarded) -> Option<String> {
    let v = answer.headers.get(http::header::ETAG)?.to_str().ok()?;
    Some(shoal::store::unquote_etag(v).to_owned())
}

/// A `<Tag>value</Tag>` of a small XML answer.
fn element(body: &[u8], tag: &str) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let (_, rest) = text.split_once(&format!("<{tag}>"))?;
    let (v, _) = rest.split_once(&format!("</{tag}>"))?;
    Some(v.replace("&quot;", "\"").replace("&#34;", "\""))
}

impl WriteRoute {
    /// A PUT or an upload part: streamed on as it arrives when its length is
    /// known and its checksum (if any) is in its headers; held whole otherwise
    /// (no length: `Transfer-Encoding: chunked`; an aws-chunked trailer, read
    /// only once the body is), then sent with its length and checksum header.
    async fn upload(
        &self,
        req: S3Request<s3s::Body>,
        bucket: &str,
        key: &str,
    ) -> S3Result<(Forwarded, u64)> {
        let mut headers = passed(&req.headers);
        let length = req
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        let trailer = req.headers.contains_key("x-amz-trailer");
        let (body, len): (s3s::Body, u64) = match length {
            Some(len) if !trailer => (req.input, len),
            _ => {
                let bytes = held(req.input, MAX_HELD).await?;
                if let Some(t) = &req.trailing_headers {
                    t.read(|h| {
                        for (name, value) in h {
                            if let Ok(v) = value.to_str() {
                                headers.push((name.as_str().to_owned(), v.to_owned()));
                            }
                        }
                    });
                }
                let len = bytes.len() as u64;
                (s3s::Body::from(bytes), len)
            }
        };
        let answer = self
            .writes
            .origin
            .forward_upload(
                req.method.clone(),
                bucket,
                key,
                passed_query(&req.uri),
                headers,
                body,
                len,
            )
            .await
            .map_err(store_error)?;
        Ok((answer, len))
    }

    /// A CompleteMultipartUpload's answer, read whole (it is small, and may
    /// be an error in a 200), and what it leaves in the cache.
    async fn completed(
        &self,
        mut answer: Forwarded,
        bucket: &str,
        key: &str,
    ) -> S3Result<S3Response<s3s::Body>> {
        let mut body = BytesMut::new();
        while let Some(chunk) = answer.body.try_next().await.map_err(store_error)? {
            body.extend_from_slice(&chunk);
        }
        let body = body.freeze();
        let made = (200..300).contains(&answer.status)
            && element(&body, "Error").is_none()
            && !String::from_utf8_lossy(&body).contains("<Error>");
        let etag = element(&body, "ETag").map(|e| shoal::store::unquote_etag(&e).to_owned());
        match (made, etag) {
            (true, Some(etag)) if self.writes.warm.is_some() => {
                // The answer names no size; the version just made does.
                let size = self
                    .writes
                    .origin
                    .head_object(&shoal::store::GetObject::new(bucket, key).if_match(&etag))
                    .await
                    .map(|m| m.size);
                match size {
                    Ok(size) => self.writes.written(bucket, key, &etag, size).await,
                    // Overwritten again already: drop everything, warm nothing.
                    Err(_) => self.writes.invalidate(bucket, Purge::Key(key.into())).await,
                }
            }
            (true, Some(etag)) => {
                self.writes
                    .invalidate(bucket, Purge::KeyExcept(key.into(), etag))
                    .await
            }
            // An answer we cannot read: what the key reads may have changed.
            _ if (200..300).contains(&answer.status) => {
                self.writes.invalidate(bucket, Purge::Key(key.into())).await
            }
            _ => {}
        }
        let mut resp = streamed(Forwarded {
            status: answer.status,
            headers: answer.headers,
            body: Box::pin(futures_util::stream::empty()),
        });
        resp.output = s3s::Body::from(body);
        Ok(resp)
    }
}

#[async_trait::async_trait]
impl s3s::route::S3Route for WriteRoute {
    fn is_match(
        &self,
        method: &Method,
        uri: &http::Uri,
        headers: &http::HeaderMap,
        _: &mut http::Extensions,
    ) -> bool {
        kind(method, uri, headers, &self.domains).is_some()
    }

    async fn check_access(&self, req: &mut S3Request<s3s::Body>) -> S3Result<()> {
        // Writes are taken from authenticated clients only (checked at start).
        signed_or_open(false, req)
    }

    async fn call(&self, req: S3Request<s3s::Body>) -> S3Result<S3Response<s3s::Body>> {
        let kind = kind(&req.method, &req.uri, &req.headers, &self.domains)
            .ok_or_else(|| s3_error!(InternalError, "not a passed-on write"))?;
        let (bucket, key) = address(&req.uri, &req.headers, &self.domains).unwrap_or_default();
        if !key.is_empty() {
            super::error::check_key(&key)?;
        }
        let writes = &self.writes;
        // DeleteBucket itself, not one of its subresources.
        let bucket_gone = kind == Kind::Bucket
            && req.method == Method::DELETE
            && passed_query(&req.uri).is_empty();
        let (answer, len, many) = match kind {
            Kind::Put | Kind::Part => {
                let (answer, len) = self.upload(req, &bucket, &key).await?;
                (answer, len, vec![])
            }
            _ => {
                let method = req.method.clone();
                let query = passed_query(&req.uri);
                let headers = passed(&req.headers);
                let body = held(req.input, MAX_BODY).await?;
                let many = match kind {
                    Kind::DeleteMany => deleted_keys(&body).unwrap_or_default(),
                    _ => vec![],
                };
                let answer = writes
                    .origin
                    .forward_write(method, &bucket, &key, query, headers, body)
                    .await
                    .map_err(store_error)?;
                (answer, 0, many)
            }
        };
        writes.count(kind.label());
        let took = (200..300).contains(&answer.status);
        if kind == Kind::Complete {
            return self.completed(answer, &bucket, &key).await;
        }
        if took {
            match kind {
                Kind::Put => match etag(&answer) {
                    Some(e) => writes.written(&bucket, &key, &e, len).await,
                    None => writes.invalidate(&bucket, Purge::Key(key.clone())).await,
                },
                // A new version (a copy's; a delete marker) or none left: what
                // the key reads changed. (A copy can fail after its 200 with an
                // error in the body: dropping the key then costs a refetch.)
                Kind::Copy | Kind::Delete => {
                    writes.invalidate(&bucket, Purge::Key(key.clone())).await
                }
                Kind::DeleteMany => {
                    for k in many {
                        writes.invalidate(&bucket, Purge::Key(k)).await;
                    }
                }
                // A bucket deleted starts its listings afresh.
                Kind::Bucket if bucket_gone => {
                    writes
                        .invalidate(&bucket, Purge::Prefix(String::new()))
                        .await
                }
                _ => {}
            }
        }
        Ok(streamed(answer))
    }
}

/// What a DeleteObjects asks: writing each key its body names. The body is read
/// here (it is small) and put back for the write itself.
pub async fn delete_many_asks(
    req: &mut S3Request<s3s::Body>,
    bucket: &str,
) -> S3Result<crate::access::Request> {
    let body = held(
        std::mem::replace(&mut req.input, s3s::Body::empty()),
        MAX_BODY,
    )
    .await?;
    let keys = deleted_keys(&body)?;
    req.input = s3s::Body::from(body);
    let asks = keys
        .iter()
        .map(|k| crate::access::Ask::key(shoal::scope::Action::Write, bucket, k))
        .collect();
    Ok(crate::access::Request::All(asks))
}
