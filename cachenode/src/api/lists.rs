//! Listings and bucket-level reads (ListObjects v1 and v2, ListBuckets,
//! GetBucketLocation, HeadBucket), passed through to the origin: the client's
//! query goes to the origin as it asked it (re-signed with the node's origin
//! credentials), and the origin's answer comes back as the origin gave it, status,
//! XML body and all. So `encoding-type`, `fetch-owner`, markers, continuation
//! tokens, storage classes and error codes are exactly the origin's, and a key no
//! XML can carry unencoded is the origin's to answer for, as it would be without
//! a node.

use std::sync::Arc;

use http::Method;
use s3s::{S3Request, S3Response, S3Result};

use super::passthrough::{address, forward, query_pairs, signed_or_open};
use crate::metrics::KindLabel;
use crate::node::Node;

/// Query parameters that name a bucket subresource this node does not pass on.
const SUBRESOURCES: &[&str] = &[
    "accelerate",
    "acl",
    "analytics",
    "cors",
    "delete",
    "encryption",
    "intelligent-tiering",
    "inventory",
    "lifecycle",
    "logging",
    "metrics",
    "notification",
    "object-lock",
    "ownershipControls",
    "policy",
    "policyStatus",
    "publicAccessBlock",
    "replication",
    "requestPayment",
    "tagging",
    "uploads",
    "versioning",
    "versions",
    "website",
    "shoal-purge",
];

pub struct ListRoute {
    pub node: Arc<Node>,
    /// Where listings and bucket reads go: the origin, with the node's credentials.
    pub origin: shoal::store::s3::S3Client,
    /// `auth.mode = "none"`: anonymous requests are served.
    pub open: bool,
    /// Base domains of virtual-hosted requests (`bucket.DOMAIN`).
    pub domains: Vec<String>,
}

impl ListRoute {
    /// The bucket a bucket-level request addresses (`""` for the service).
    fn bucket(&self, uri: &http::Uri, headers: &http::HeaderMap) -> Option<String> {
        let (bucket, key) = address(uri, headers, &self.domains)?;
        key.is_empty().then_some(bucket)
    }
}

#[async_trait::async_trait]
impl s3s::route::S3Route for ListRoute {
    fn is_match(
        &self,
        method: &Method,
        uri: &http::Uri,
        headers: &http::HeaderMap,
        _: &mut http::Extensions,
    ) -> bool {
        if method != Method::GET && method != Method::HEAD {
            return false;
        }
        let Some(bucket) = self.bucket(uri, headers) else {
            return false;
        };
        let query = query_pairs(uri);
        if query
            .iter()
            .any(|(k, _)| SUBRESOURCES.contains(&k.as_str()))
        {
            return false;
        }
        // HEAD is HeadBucket; the service root takes only GET (ListBuckets).
        method == Method::GET || (!bucket.is_empty() && query.is_empty())
    }

    async fn check_access(&self, req: &mut S3Request<s3s::Body>) -> S3Result<()> {
        signed_or_open(self.open, req)
    }

    async fn call(&self, req: S3Request<s3s::Body>) -> S3Result<S3Response<s3s::Body>> {
        let bucket = self.bucket(&req.uri, &req.headers).unwrap_or_default();
        self.node
            .metrics
            .origin_requests
            .get_or_create(&KindLabel { kind: "list" })
            .inc();
        forward(&self.origin, &req, &bucket, "").await
    }
}
