//! Listings and bucket-level reads (ListObjects v1 and v2, ListBuckets,
//! HeadBucket, and every bucket subresource GET: location, ACL, versioning,
//! tagging, policy, uploads, versions, ...), passed through to the origin: the client's
//! query goes to the origin as it asked it (re-signed with the node's origin
//! credentials), and the origin's answer comes back as the origin gave it, status,
//! XML body and all. So `encoding-type`, `fetch-owner`, markers, continuation
//! tokens, storage classes and error codes are exactly the origin's, and a key no
//! XML can carry unencoded is the origin's to answer for, as it would be without
//! a node.
//!
//! A listing asked with `x-shoal-metadata-ttl` (a mount's), or matching a rule
//! with a `list_ttl` (a plain client's), may be answered from the node's
//! metadata cache instead: the origin's answer as it was, byte for byte, with an
//! `Age` header; identical listings in flight cost the origin one. A page this
//! node owns and lacks is asked of the node that owned it before (its runner-up,
//! `only-if-cached`) first ([`crate::node::Peers::listing`]), and kept as old as
//! it was there.
//!
//! A cached-only listing never reaches the origin, so the node answers for its
//! query itself: one S3 would refuse is refused with `400 InvalidArgument`,
//! not taken for a miss.

use std::sync::Arc;

use http::Method;
use s3s::{S3Request, S3Response, S3Result};

use super::error::{cached_only, not_cached, store_error};
use super::objects::asked_ttl;
use super::passthrough::{address, fetch_whole, forward, passed_headers, respond, signed_or_open};
use super::query::query_pairs;
use crate::metadata_cache::age_secs_up;
use crate::node::{Listed, Node};

/// The query parameters of a ListObjects request (v1 or v2); a bucket GET with
/// any other is not a listing and is never cached.
pub const LIST_PARAMS: &[&str] = &[
    "list-type",
    "prefix",
    "delimiter",
    "continuation-token",
    "start-after",
    "max-keys",
    "encoding-type",
    "fetch-owner",
    "marker",
];

/// Query parameters of requests that are not the origin's to answer.
const REFUSED: &[&str] = &["shoal-purge"];

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
        if query.iter().any(|(k, _)| REFUSED.contains(&k.as_str())) {
            return false;
        }
        // Every bucket GET is a read (a listing, or a subresource: ACL,
        // versioning, tagging, location, policy, uploads, versions, ...) and goes
        // to the origin as asked. HEAD is HeadBucket; the service root takes only
        // GET (ListBuckets).
        method == Method::GET || (!bucket.is_empty() && query.is_empty())
    }

    async fn check_access(&self, req: &mut S3Request<s3s::Body>) -> S3Result<()> {
        signed_or_open(self.open, req)
    }

    async fn call(&self, req: S3Request<s3s::Body>) -> S3Result<S3Response<s3s::Body>> {
        let bucket = self.bucket(&req.uri, &req.headers).unwrap_or_default();
        let query = query_pairs(&req.uri);
        let cached_only = cached_only(&req.headers);
        let listing = req.method == Method::GET
            && !bucket.is_empty()
            && query.iter().all(|(k, _)| LIST_PARAMS.contains(&k.as_str()));
        if listing && cached_only {
            check_query(&query)?;
        }
        let prefix = query
            .iter()
            .find(|(k, _)| k == "prefix")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let asked = match asked_ttl(&req.headers)? {
            Some(t) => Some(t),
            None => self.node.policy(&bucket, &prefix).list_ttl,
        };
        // An asker's max-age bounds the answer's age: 0 has the origin
        // asked now, and its answer kept for the askers after it.
        let max_age = super::objects::asked_max_age(&req.headers)?;
        let accept = if listing {
            self.node
                .metadata
                .accept(asked)
                .map(|a| max_age.map_or(a, |m| a.min(m)))
        } else {
            None
        };
        let Some(accept) = accept else {
            if cached_only {
                return Err(not_cached(&req.headers));
            }
            let kind = if listing { "list" } else { "bucket" };
            self.node.metrics.origin_request(kind);
            return forward(&self.origin, &req, &bucket, "").await;
        };
        let passed = passed_headers(&req.headers);
        let id = listing_id(&bucket, &query, &passed);
        let metadata = &self.node.metadata;
        if cached_only {
            return match metadata.fresh_listing(&id, accept) {
                Some((answer, age)) => {
                    self.node.metrics.metadata_request("list", "hit");
                    // Rounded up: the asker keeps the copy this old.
                    Ok(respond(&answer, Some(age_secs_up(age))))
                }
                None => Err(not_cached(&req.headers)),
            };
        }
        let (origin, node, b) = (self.origin.clone(), self.node.clone(), bucket.clone());
        let fetch = async move {
            // Routed as the cluster's readers route it: its previous owner is
            // this page's runner-up.
            let param = |name: &str| {
                query
                    .iter()
                    .find(|(k, _)| k == name)
                    .map_or("", |(_, v)| v.as_str())
            };
            let route = shoal::route::list_page_key(
                param("prefix"),
                param("delimiter"),
                param("continuation-token"),
            );
            if let Some(p) = node.peers() {
                let taken = p
                    .listing(&b, &route, &query, &passed, accept, &node.metrics)
                    .await;
                if let Some((answer, age)) = taken {
                    return Ok((answer, Some(age)));
                }
            }
            node.metrics.origin_request("list");
            Ok((fetch_whole(&origin, &b, query, passed).await?, None))
        };
        // The fetch is its asker's, wherever it runs: its asks are on its line.
        let fetch = crate::access::trace::scope(crate::access::trace::current(), fetch);
        let (answer, how) = metadata
            .listing_aged(id, (&bucket, &prefix), accept, fetch)
            .await
            .map_err(store_error)?;
        let (result, age) = match how {
            Listed::Hit(age) => ("hit", Some(age.as_secs())),
            // A miss here, as old as it was on the node that held it.
            Listed::Taken(age) => ("miss", Some(age.as_secs())),
            Listed::Fetched => ("miss", None),
            Listed::Joined => ("coalesced", None),
        };
        self.node.metrics.metadata_request("list", result);
        Ok(respond(&answer, age))
    }
}

/// Refuses a listing query S3 would refuse (what a cached-only listing is
/// answered with instead of the origin's error): a `list-type` other than 2,
/// a `max-keys` that is not a count, an `encoding-type` other than `url`, a
/// `fetch-owner` other than `true` or `false`.
fn check_query(query: &[(String, String)]) -> S3Result<()> {
    for (k, v) in query {
        let ok = match k.as_str() {
            "list-type" => v == "2",
            "max-keys" => !v.is_empty() && v.len() <= 10 && v.bytes().all(|b| b.is_ascii_digit()),
            "encoding-type" => v == "url",
            "fetch-owner" => v == "true" || v == "false",
            _ => true,
        };
        if !ok {
            return Err(s3s::s3_error!(
                InvalidArgument,
                "invalid listing parameter {k}={v:?} (a cached-only listing is checked by the node)"
            ));
        }
    }
    Ok(())
}

/// A listing's identity in the cache: its bucket, its query in a canonical order,
/// and the client headers that change the origin's answer.
fn listing_id(bucket: &str, query: &[(String, String)], passed: &[(&str, String)]) -> String {
    let mut q: Vec<&(String, String)> = query.iter().collect();
    q.sort();
    // Every part with its length: no value can pass for another part.
    let mut id = String::from("list");
    let mut part = |s: &str| id.push_str(&format!(" {}:{s}", s.len()));
    part(bucket);
    for (k, v) in q {
        part(k);
        part(v);
    }
    for (h, v) in passed {
        part(h);
        part(v);
    }
    id
}
