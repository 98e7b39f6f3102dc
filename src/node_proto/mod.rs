//! shoal's own protocol between readers and nodes, on top of S3.
//!
//! A node is an S3 endpoint; what it needs beyond S3 travels in a few headers and
//! one extra request:
//! - `x-shoal-hop`: how many nodes a request has passed through; a node never
//!   forwards a request at its hop limit, so gateways that list each other cannot
//!   loop.
//! - `x-shoal-cached-only`: answer only from the cache, else `503 ShoalNotCached`;
//!   hedges carry it so a second request never becomes a second origin fetch.
//! - `x-shoal-metadata-ttl`: on a listing or a HEAD, how old (in seconds) an
//!   answer the asker accepts from the node's metadata cache; without it a node
//!   passes listings through as the origin gives them.
//! - `Cache-Control: max-age=N` (or `no-cache`) on a listing or a HEAD: the
//!   oldest answer the asker takes at all, under the metadata TTL and the node's
//!   `revalidate_after` both; 0 has the origin asked now and its answer kept in
//!   place of the old one (a refresh).
//! - `x-shoal-class`: what a block request is for (`read-ahead`, `background`;
//!   a read a client waits on carries none), so that the node's origin budget
//!   serves waiting reads first ([`crate::store::budget`]).
//! - `POST /BUCKET?shoal-purge`: drop cached data ([`purge`]).
//!
//! [`client`] builds the S3 client a reader uses for one node.

pub mod client;
pub mod purge;

use std::time::Duration;

use crate::store::budget::Class;
use crate::store::{ExtraHeaders, GetObject, StoreError};

pub use client::{node_client, node_options};
pub use purge::Purge;

/// The header that counts a request's hops between nodes.
pub const HOP_HEADER: &str = "x-shoal-hop";
/// The header a cached-only request carries.
pub const CACHED_ONLY_HEADER: &str = "x-shoal-cached-only";
/// The header that says how old a cached listing or HEAD the asker accepts.
pub const METADATA_TTL_HEADER: &str = "x-shoal-metadata-ttl";
/// The longest metadata TTL a header may carry (a day): anything longer is a typo.
pub const MAX_METADATA_TTL: Duration = Duration::from_secs(86_400);
/// The header that says what a block request is for.
pub const CLASS_HEADER: &str = "x-shoal-class";
/// The S3 error code of a cached-only request the node could not serve from cache.
pub const NOT_CACHED: &str = "ShoalNotCached";

/// Marks `req` as having passed through `hop` nodes (0: none, no header).
pub fn set_hop(req: &mut impl ExtraHeaders, hop: u32) {
    req.set_header(HOP_HEADER, (hop > 0).then(|| hop.to_string()));
}

/// The hop count `req` carries.
pub fn hop_of(req: &GetObject) -> u32 {
    req.header(HOP_HEADER)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Asks the node to answer `req` from its cache only.
pub fn set_cached_only(req: &mut impl ExtraHeaders, on: bool) {
    req.set_header(CACHED_ONLY_HEADER, on.then(|| "1".to_owned()));
}

/// Whether `req` asks for what a node holds only.
pub fn is_cached_only(req: &GetObject) -> bool {
    req.header(CACHED_ONLY_HEADER).is_some()
}

/// What a cached-only request that no node could answer from its cache comes
/// to: never the origin's bytes in its place.
pub fn not_held(req: &GetObject) -> StoreError {
    StoreError::Server {
        status: 504,
        code: NOT_CACHED.to_owned(),
        message: format!("no node holds {} {:?}", req.key, req.range),
    }
}

/// Says what `req` is for: a read someone waits on carries no header.
pub fn set_class(req: &mut impl ExtraHeaders, class: Class) {
    req.set_header(
        CLASS_HEADER,
        (class != Class::Read).then(|| class.as_str().to_owned()),
    );
}

/// Says the asker accepts cached metadata up to `ttl` old (zero: no header).
pub fn set_metadata_ttl(req: &mut impl ExtraHeaders, ttl: Duration) {
    let ttl = ttl.min(MAX_METADATA_TTL);
    req.set_header(
        METADATA_TTL_HEADER,
        (!ttl.is_zero()).then(|| format!("{:.3}", ttl.as_secs_f64())),
    );
}

/// Says the asker takes no metadata older than `max_age` (RFC 9111's
/// `max-age`, whole seconds, rounded down); `None`: no bound.
pub fn set_max_age(req: &mut impl ExtraHeaders, max_age: Option<Duration>) {
    req.set_header(
        "cache-control",
        max_age.map(|a| format!("max-age={}", a.as_secs())),
    );
}

/// A `max-age` directive's value: RFC 9111's delta-seconds, a non-negative
/// integer (one past `u64` is the longest bound, as the RFC has it).
pub fn parse_max_age(value: &str) -> Option<u64> {
    let v = value.trim().trim_matches('"');
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(v.parse().unwrap_or(u64::MAX))
}

/// A metadata TTL header's value: seconds, a fraction allowed, at most a day.
pub fn parse_metadata_ttl(value: &str) -> Option<Duration> {
    let secs: f64 = value.trim().parse().ok()?;
    (secs.is_finite() && secs >= 0.0 && secs <= MAX_METADATA_TTL.as_secs_f64())
        .then(|| Duration::from_secs_f64(secs))
}

/// A request as a node sends it to the origin: none of this protocol's headers.
pub fn strip(req: &mut impl ExtraHeaders) {
    req.set_header(HOP_HEADER, None);
    req.set_header(CACHED_ONLY_HEADER, None);
    req.set_header(METADATA_TTL_HEADER, None);
    req.set_header(CLASS_HEADER, None);
    req.set_header("cache-control", None);
}

/// A hop header's value, if it is one.
pub fn parse_hop(value: &str) -> Option<u32> {
    value.trim().parse().ok()
}

/// The answer to a cached-only request that the node could not serve from cache.
pub fn is_not_cached(e: &StoreError) -> bool {
    matches!(e.cause(), StoreError::Server { code, .. } if code == NOT_CACHED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_set_and_clear() {
        let mut r = GetObject::new("b", "k");
        set_hop(&mut r, 2);
        set_cached_only(&mut r, true);
        assert_eq!(hop_of(&r), 2);
        assert_eq!(r.header(CACHED_ONLY_HEADER), Some("1"));
        set_hop(&mut r, 3);
        assert_eq!(r.headers.len(), 2);
        strip(&mut r);
        assert!(r.headers.is_empty() && hop_of(&r) == 0);
        assert_eq!(parse_hop(" 1 "), Some(1));
        assert_eq!(parse_hop("x"), None);
        set_metadata_ttl(&mut r, Duration::from_millis(1500));
        assert_eq!(r.header(METADATA_TTL_HEADER), Some("1.500"));
        set_metadata_ttl(&mut r, Duration::ZERO);
        assert_eq!(r.header(METADATA_TTL_HEADER), None);
        assert_eq!(parse_metadata_ttl(" 10 "), Some(Duration::from_secs(10)));
        assert_eq!(parse_metadata_ttl("0.25"), Some(Duration::from_millis(250)));
        for bad in ["-1", "NaN", "inf", "1e9", "ten", ""] {
            assert_eq!(parse_metadata_ttl(bad), None, "{bad:?}");
        }
        let e = StoreError::Server {
            status: 503,
            code: NOT_CACHED.into(),
            message: String::new(),
        };
        assert!(is_not_cached(&e));
    }
}
