//! The S3 client: what both the node (toward the origin) and the cluster reader
//! (toward nodes, which speak S3) use.
//!
//! Bodies stream as `Bytes` chunks and are never buffered whole; every request has a
//! connect, first-byte and body-stall deadline; idempotent requests are retried with
//! jittered exponential backoff on 5xx, throttling and transport errors.

mod client;
mod encode;
mod error;
mod sign;
mod xml;

use std::pin::Pin;
use std::time::SystemTime;

use bytes::Bytes;
use futures_util::Stream;

pub use client::{Purge, S3Client, S3ClientOptions};
pub use encode::key_problem;
pub use error::{Deadline, S3Error};
pub use sign::{Payload, Signer};

/// The parsers of what an S3 server sends back, public so that the fuzz targets
/// reach exactly the code the client runs.
pub mod parse {
    pub use super::client::parse_content_range as content_range;
    pub use super::xml::{
        parse_error as error_body, parse_list as list_objects, CommonPrefix, Contents, ErrorBody,
        ListBucketResult,
    };
}

/// A body as it arrives.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, S3Error>> + Send>>;

/// A `Range` header value: `bytes=a-b`, `bytes=a-`, or `bytes=-n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteRange {
    /// Inclusive `first..=last`; `last = None` reads to the end.
    From { first: u64, last: Option<u64> },
    /// The last `n` bytes.
    Suffix(u64),
}

impl ByteRange {
    /// The half-open byte range `start..end`.
    pub fn span(start: u64, end: u64) -> ByteRange {
        assert!(end > start, "empty range {start}..{end}");
        ByteRange::From {
            first: start,
            last: Some(end - 1),
        }
    }

    pub fn header(&self) -> String {
        match self {
            ByteRange::From {
                first,
                last: Some(l),
            } => format!("bytes={first}-{l}"),
            ByteRange::From { first, last: None } => format!("bytes={first}-"),
            ByteRange::Suffix(n) => format!("bytes=-{n}"),
        }
    }
}

/// What is known about one object version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectMeta {
    /// Size of the whole object.
    pub size: u64,
    /// The ETag without quotes.
    pub etag: String,
    pub last_modified: Option<SystemTime>,
    pub content_type: Option<String>,
}

/// A GET (or HEAD) of one object.
#[derive(Clone, Debug, Default)]
pub struct GetObject {
    pub bucket: String,
    pub key: String,
    pub range: Option<ByteRange>,
    pub if_match: Option<String>,
    pub if_none_match: Option<String>,
    /// Ask a shoal node to answer only from its cache (`x-shoal-cached-only`), with
    /// [`NOT_CACHED`] when it would have to go to the origin. Hedges use it so that a
    /// second request never becomes a second origin fetch.
    pub cached_only: bool,
    /// How many nodes this request has passed through (`x-shoal-hop`; 0 = none, sent
    /// only to nodes): a node never forwards a request at its hop limit.
    pub hop: u32,
}

/// The header that counts a request's hops between nodes.
pub const HOP_HEADER: &str = "x-shoal-hop";

/// The header a cached-only request carries.
pub const CACHED_ONLY_HEADER: &str = "x-shoal-cached-only";
/// The S3 error code of a cached-only request the node could not serve from cache.
pub const NOT_CACHED: &str = "ShoalNotCached";

impl GetObject {
    pub fn new(bucket: impl Into<String>, key: impl Into<String>) -> Self {
        Self {
            bucket: bucket.into(),
            key: key.into(),
            ..Default::default()
        }
    }
    pub fn range(mut self, r: ByteRange) -> Self {
        self.range = Some(r);
        self
    }
    pub fn if_match(mut self, etag: impl Into<String>) -> Self {
        self.if_match = Some(etag.into());
        self
    }
}

/// A streamed GET answer.
pub struct GetResponse {
    pub meta: ObjectMeta,
    /// The bytes of the object this body carries: `start..end`.
    pub start: u64,
    pub end: u64,
    pub body: ByteStream,
}

impl GetResponse {
    /// Reads the whole body; errors if it ends short.
    pub async fn collect(self) -> Result<Bytes, S3Error> {
        use futures_util::StreamExt;
        let want = (self.end - self.start) as usize;
        let mut body = self.body;
        let mut buf = bytes::BytesMut::with_capacity(want);
        while let Some(chunk) = body.next().await {
            buf.extend_from_slice(&chunk?);
        }
        if buf.len() != want {
            return Err(S3Error::Protocol {
                endpoint: String::new(),
                message: format!("body ended after {} of {want} bytes", buf.len()),
            });
        }
        Ok(buf.freeze())
    }
}

/// One ListObjectsV2 request.
#[derive(Clone, Debug, Default)]
pub struct ListRequest {
    pub bucket: String,
    pub prefix: String,
    pub delimiter: Option<String>,
    pub continuation_token: Option<String>,
    pub start_after: Option<String>,
    pub max_keys: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListEntry {
    pub key: String,
    pub size: u64,
    /// Without quotes; empty if the server left it out.
    pub etag: String,
    pub last_modified: Option<SystemTime>,
}

#[derive(Clone, Debug, Default)]
pub struct ListPage {
    pub objects: Vec<ListEntry>,
    pub common_prefixes: Vec<String>,
    pub next_continuation_token: Option<String>,
}

/// Strips the quotes (and a weak `W/`) from an ETag header value.
pub fn unquote_etag(s: &str) -> &str {
    let s = s.trim();
    let s = s.strip_prefix("W/").unwrap_or(s);
    s.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(s)
}
