//! What goes into and comes out of an [`super::ObjectStore`].

use std::pin::Pin;
use std::time::SystemTime;

use bytes::Bytes;
use futures_util::Stream;

use super::StoreError;

/// A body as it arrives.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, StoreError>> + Send>>;

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

    /// The half-open span this range selects of an object of `size` bytes, if any
    /// (S3's rules: a last byte past the end is clamped, a first one is not).
    pub fn resolve(&self, size: u64) -> Option<(u64, u64)> {
        let (start, end) = match *self {
            ByteRange::From { first, last } => {
                let end = last.map_or(size, |l| l.saturating_add(1).min(size));
                (first, end)
            }
            ByteRange::Suffix(n) => (size.saturating_sub(n), size),
        };
        (start < end).then_some((start, end))
    }
}

/// What is known about one object version.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectMeta {
    /// Size of the whole object.
    pub size: u64,
    /// The ETag without quotes.
    pub etag: String,
    pub last_modified: Option<SystemTime>,
    pub content_type: Option<String>,
    /// The other headers the object was stored with and every answer about it
    /// carries ([`STORED_HEADERS`], `x-amz-meta-*`), names lower-case.
    pub headers: Vec<(String, String)>,
}

impl ObjectMeta {
    /// The archive class of an object not (or not yet) restored: GETs of it fail.
    pub fn archived(&self) -> Option<&str> {
        let header = |n: &str| {
            self.headers
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.as_str())
        };
        let class = header("x-amz-storage-class").filter(|c| is_archive_class(c))?;
        let restored =
            header("x-amz-restore").is_some_and(|r| r.contains("ongoing-request=\"false\""));
        (!restored).then_some(class)
    }
}

/// The headers an object is stored with, beside `Content-Type` and the metadata
/// (`x-amz-meta-*`): a cache passes them on as the origin gave them.
pub const STORED_HEADERS: &[&str] = &[
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "expires",
    "x-amz-storage-class",
    "x-amz-restore",
    "x-amz-version-id",
    "x-amz-website-redirect-location",
    "x-amz-server-side-encryption",
    "x-amz-server-side-encryption-aws-kms-key-id",
    "x-amz-server-side-encryption-bucket-key-enabled",
    "x-amz-server-side-encryption-customer-algorithm",
    "x-amz-server-side-encryption-customer-key-md5",
    "x-amz-tagging-count",
    "x-amz-restore",
    "x-amz-object-lock-mode",
    "x-amz-object-lock-retain-until-date",
    "x-amz-object-lock-legal-hold",
    "x-amz-replication-status",
    "x-amz-mp-parts-count",
];

/// Whether response header `name` (lower-case) is one an object was stored with.
pub fn is_stored_header(name: &str) -> bool {
    name.starts_with("x-amz-meta-") || STORED_HEADERS.contains(&name)
}

/// A GET (or HEAD) of one object.
#[derive(Clone, Debug, Default)]
pub struct GetObject {
    pub bucket: String,
    pub key: String,
    pub range: Option<ByteRange>,
    pub if_match: Option<String>,
    pub if_none_match: Option<String>,
    /// Extra request headers, sent unsigned (a protocol on top of S3 adds its own,
    /// see [`crate::node_proto`]).
    pub headers: Vec<(&'static str, String)>,
    /// Extra query parameters (`partNumber`, `response-content-type`, ...).
    pub query: Vec<(&'static str, String)>,
    /// How long the answer's head may take, if not the client's own deadline
    /// (a request nobody waits on, served after those someone does).
    pub first_byte: Option<std::time::Duration>,
}

/// A request that carries extra headers ([`GetObject`], [`ListRequest`]).
pub trait ExtraHeaders {
    fn extra_headers(&mut self) -> &mut Vec<(&'static str, String)>;
    /// Sets extra header `name` (replacing an earlier value), or removes it.
    fn set_header(&mut self, name: &'static str, value: Option<String>) {
        let h = self.extra_headers();
        h.retain(|(n, _)| *n != name);
        if let Some(v) = value {
            h.push((name, v));
        }
    }
}

impl ExtraHeaders for GetObject {
    fn extra_headers(&mut self) -> &mut Vec<(&'static str, String)> {
        &mut self.headers
    }
}

impl ExtraHeaders for ListRequest {
    fn extra_headers(&mut self) -> &mut Vec<(&'static str, String)> {
        &mut self.headers
    }
}

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
    /// Waits up to `d` for the answer's head, whatever the client's deadline.
    pub fn first_byte_within(mut self, d: std::time::Duration) -> Self {
        self.first_byte = Some(d);
        self
    }
    /// The value of extra header `name`, if set.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
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

/// One ListObjectsV2 request.
#[derive(Clone, Debug, Default)]
pub struct ListRequest {
    pub bucket: String,
    pub prefix: String,
    pub delimiter: Option<String>,
    pub continuation_token: Option<String>,
    pub start_after: Option<String>,
    pub max_keys: Option<u32>,
    /// Extra request headers, sent unsigned, as [`GetObject::headers`].
    pub headers: Vec<(&'static str, String)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListEntry {
    pub key: String,
    pub size: u64,
    /// Without quotes; empty if the server left it out.
    pub etag: String,
    pub last_modified: Option<SystemTime>,
    /// Absent for STANDARD.
    pub storage_class: Option<String>,
}

impl ListEntry {
    /// In an archive class: readable only once restored.
    pub fn archived(&self) -> bool {
        self.storage_class.as_deref().is_some_and(is_archive_class)
    }
}

/// Storage classes whose objects must be restored before a GET (Glacier Instant
/// Retrieval is not one of them).
pub fn is_archive_class(class: &str) -> bool {
    matches!(class, "GLACIER" | "DEEP_ARCHIVE")
}

#[derive(Clone, Debug, Default)]
pub struct ListPage {
    pub objects: Vec<ListEntry>,
    pub common_prefixes: Vec<String>,
    pub next_continuation_token: Option<String>,
    /// How old the answer was when it came (its `Age`): a cache answered it.
    pub age: Option<std::time::Duration>,
}

/// Strips the quotes (and a weak `W/`) from an ETag header value.
pub fn unquote_etag(s: &str) -> &str {
    let s = s.trim();
    let s = s.strip_prefix("W/").unwrap_or(s);
    s.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_resolve_as_s3_does() {
        let r = |first, last| ByteRange::From { first, last };
        assert_eq!(r(0, Some(9)).resolve(100), Some((0, 10)));
        assert_eq!(r(90, Some(200)).resolve(100), Some((90, 100)));
        assert_eq!(r(100, None).resolve(100), None);
        assert_eq!(ByteRange::Suffix(10).resolve(5), Some((0, 5)));
        assert_eq!(ByteRange::Suffix(0).resolve(5), None);
        assert_eq!(r(0, None).resolve(0), None);
    }
}
