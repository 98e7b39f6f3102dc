//! shoal's own protocol between readers and nodes, on top of S3.
//!
//! A node is an S3 endpoint; what it needs beyond S3 travels in a few headers and
//! one extra request:
//! - `x-shoal-hop`: how many nodes a request has passed through; a node never
//!   forwards a request at its hop limit, so gateways that list each other cannot
//!   loop.
//! - `x-shoal-cached-only`: answer only from the cache, else `503 ShoalNotCached`;
//!   hedges carry it so a second request never becomes a second origin fetch.
//! - `POST /BUCKET?shoal-purge`: drop cached data ([`purge`]).
//!
//! [`client`] builds the S3 client a reader uses for one node.

pub mod client;
pub mod purge;

use crate::store::{GetObject, StoreError};

pub use client::{node_client, node_options};
pub use purge::Purge;

/// The header that counts a request's hops between nodes.
pub const HOP_HEADER: &str = "x-shoal-hop";
/// The header a cached-only request carries.
pub const CACHED_ONLY_HEADER: &str = "x-shoal-cached-only";
/// The S3 error code of a cached-only request the node could not serve from cache.
pub const NOT_CACHED: &str = "ShoalNotCached";

/// Marks `req` as having passed through `hop` nodes (0: none, no header).
pub fn set_hop(req: &mut GetObject, hop: u32) {
    req.set_header(HOP_HEADER, (hop > 0).then(|| hop.to_string()));
}

/// The hop count `req` carries.
pub fn hop_of(req: &GetObject) -> u32 {
    req.header(HOP_HEADER)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Asks the node to answer `req` from its cache only.
pub fn set_cached_only(req: &mut GetObject, on: bool) {
    req.set_header(CACHED_ONLY_HEADER, on.then(|| "1".to_owned()));
}

/// A request as a node sends it to the origin: none of this protocol's headers.
pub fn strip(req: &mut GetObject) {
    req.set_header(HOP_HEADER, None);
    req.set_header(CACHED_ONLY_HEADER, None);
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
        let e = StoreError::Server {
            status: 503,
            code: NOT_CACHED.into(),
            message: String::new(),
        };
        assert!(is_not_cached(&e));
    }
}
