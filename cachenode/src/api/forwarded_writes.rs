//! The writes a gateway (`[gateway] writes = true`) passes on to the origin as
//! the client asked them, rather than through [`super::writes`]: CopyObject and
//! UploadPartCopy (a PUT naming `x-amz-copy-source`), bucket writes (CreateBucket,
//! DeleteBucket, a PUT or DELETE of a bucket subresource: versioning, ACL,
//! tagging, ...), and ACL, tagging, retention and legal-hold writes of an object.
//! Signed with the gateway's origin credentials, sent once; the origin's answer is
//! the client's, status, headers and body. A copy the origin took drops its
//! destination on every node, as a PUT does.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::TryStreamExt;
use http::Method;
use s3s::{S3Request, S3Response, S3Result};
use shoal::node_proto::Purge;
use shoal::store::s3::S3Client;

use super::error::store_error;
use super::passthrough::{address, query_pairs, signed_or_open, streamed};
use crate::fanout::Fanout;
use crate::metrics::KindLabel;
use crate::node::Node;

/// Object subresources whose writes pass through.
const OBJECT_SUBRESOURCES: &[&str] = &["acl", "tagging", "retention", "legal-hold"];

/// Request headers that belong to the client's own request (its signature, its
/// framing), never passed on.
const OWN: &[&str] = &[
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

/// The largest body passed on: bucket and ACL documents are small, a copy has none.
const MAX_BODY: usize = 1 << 20;

pub struct WriteRoute {
    pub node: Arc<Node>,
    pub origin: S3Client,
    pub fanout: Option<Arc<Fanout>>,
    /// Base domains of virtual-hosted requests (`bucket.DOMAIN/key`).
    pub domains: Vec<String>,
}

/// What a passed-on write is, for its metric and what follows it.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Copy,
    PartCopy,
    Bucket,
    ObjectSubresource,
}

impl WriteRoute {
    fn kind(&self, method: &Method, uri: &http::Uri, headers: &http::HeaderMap) -> Option<Kind> {
        if method != Method::PUT && method != Method::DELETE {
            return None;
        }
        let (bucket, key) = address(uri, headers, &self.domains)?;
        if bucket.is_empty() {
            return None;
        }
        let query = query_pairs(uri);
        let has = |name: &str| query.iter().any(|(k, _)| k == name);
        if key.is_empty() {
            return Some(Kind::Bucket);
        }
        if method == Method::PUT && headers.contains_key("x-amz-copy-source") {
            return Some(if has("uploadId") {
                Kind::PartCopy
            } else {
                Kind::Copy
            });
        }
        OBJECT_SUBRESOURCES
            .iter()
            .any(|s| has(s))
            .then_some(Kind::ObjectSubresource)
    }
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

#[async_trait::async_trait]
impl s3s::route::S3Route for WriteRoute {
    fn is_match(
        &self,
        method: &Method,
        uri: &http::Uri,
        headers: &http::HeaderMap,
        _: &mut http::Extensions,
    ) -> bool {
        self.kind(method, uri, headers).is_some()
    }

    async fn check_access(&self, req: &mut S3Request<s3s::Body>) -> S3Result<()> {
        // Writes are taken from authenticated clients only (checked at start).
        signed_or_open(false, req)
    }

    async fn call(&self, req: S3Request<s3s::Body>) -> S3Result<S3Response<s3s::Body>> {
        let kind = self
            .kind(&req.method, &req.uri, &req.headers)
            .ok_or_else(|| s3s::s3_error!(InternalError, "not a passed-on write"))?;
        let (bucket, key) = address(&req.uri, &req.headers, &self.domains).unwrap_or_default();
        let mut body = Vec::new();
        let mut stream = req.input;
        while let Some(chunk) = stream
            .try_next()
            .await
            .map_err(|e| s3s::s3_error!(IncompleteBody, "{e}"))?
        {
            if body.len() + chunk.len() > MAX_BODY {
                return Err(s3s::s3_error!(
                    EntityTooLarge,
                    "a bucket or ACL document over 1 MiB"
                ));
            }
            body.extend_from_slice(&chunk);
        }
        let answer = self
            .origin
            .forward_write(
                req.method.clone(),
                &bucket,
                &key,
                query_pairs(&req.uri),
                passed(&req.headers),
                Bytes::from(body),
            )
            .await
            .map_err(store_error)?;
        let label = match kind {
            Kind::Copy => "copy",
            Kind::PartCopy => "part_copy",
            Kind::Bucket => "bucket",
            Kind::ObjectSubresource => "object_subresource",
        };
        self.node
            .metrics
            .writes
            .get_or_create(&KindLabel { kind: label })
            .inc();
        let took = (200..300).contains(&answer.status);
        // A copy's destination is a new version; a bucket created or deleted
        // starts its listings afresh. (A copy can fail after its 200 with an
        // error in the body: dropping the destination then costs a refetch.)
        let dropped = match kind {
            Kind::Copy if took => Some(Purge::Key(key.clone())),
            Kind::Bucket
                if took && req.method == Method::DELETE && query_pairs(&req.uri).is_empty() =>
            {
                Some(Purge::Prefix(String::new()))
            }
            _ => None,
        };
        if let Some(target) = dropped {
            self.node
                .invalidate(self.fanout.as_deref(), &bucket, target, true)
                .await;
        }
        Ok(streamed(answer))
    }
}
