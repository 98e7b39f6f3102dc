//! How one node asks another for what it holds: the headers of an ask and
//! the GET of a block. Named here, apart from the fetch that asks and the
//! peer fill that answers, which both use them.

use shoal::blocks::BlockKey;
use shoal::store::{ByteRange, GetObject, ObjectMeta};

/// The request header and value that ask a node for its cache only.
pub const CACHE_CONTROL: &str = "cache-control";
pub const ONLY_IF_CACHED: &str = "only-if-cached";

/// The request header that marks an owner fill: the asker misses a block it
/// does not own. An owner that agrees it owns the block answers as it would
/// its own reader's miss; any other node, or one that predates the mark, takes
/// the ask as only-if-cached.
pub const OWNER_FILL: &str = "x-shoal-owner-fill";

/// Whether `headers` mark an owner fill.
pub fn owner_fill(headers: &http::HeaderMap) -> bool {
    headers.contains_key(OWNER_FILL)
}

/// Whether `headers` carry `Cache-Control: only-if-cached`.
pub fn only_if_cached(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|d| d.trim().eq_ignore_ascii_case(ONLY_IF_CACHED))
}

/// Told what an answer says of the version as soon as its headers do, before
/// its body: a node learning a version from a block knows it while the block
/// still arrives, so other nodes' asks for the block can join its fetch.
pub type Learn<'a> = &'a (dyn Fn(&ObjectMeta) + Send + Sync);

/// The GET of block `bk`'s bytes of its version (the object's `size` when
/// known: the last block is shorter), and how many bytes it asks for.
pub fn block_get(bk: &BlockKey, size: Option<u64>) -> (GetObject, Option<u64>) {
    let start = bk.start();
    let want = size.map(|s| bk.len_in(s));
    let mut req = GetObject::new(&*bk.bucket, &*bk.key).if_match(&*bk.etag);
    req.range = Some(match want {
        Some(w) => ByteRange::span(start, start + w),
        None => ByteRange::From {
            first: start,
            last: Some(start + bk.block_size - 1),
        },
    });
    (req, want)
}
