//! The I/O seam: everything shoal reads from an S3-speaking service goes through
//! [`ObjectStore`].
//!
//! The origin bucket and every cache node are object stores; so are the doubles the
//! tests compose ([`memory::MemoryStore`], [`faults::FaultStore`]), which is what lets
//! the cluster reader's hedging and failover run in a unit test with no network.
//! [`s3::S3Client`] is the real one: SigV4, deadlines, retries, S3's XML.
//!
//! Bodies stream as `Bytes` chunks and are never buffered whole unless asked
//! ([`collect`]). A store answers with [`StoreError`]: what the service said, or
//! why it could not be asked.

mod error;
#[cfg(any(test, feature = "testing"))]
pub mod faults;
#[cfg(any(test, feature = "testing"))]
pub mod memory;
pub mod s3;
mod stall;
mod types;

use bytes::Bytes;
use futures_util::StreamExt;

pub use error::{Deadline, StoreError};
pub use stall::stall_guard;
pub use types::{
    is_archive_class, is_stored_header, unquote_etag, ByteRange, ByteStream, GetObject,
    GetResponse, ListEntry, ListPage, ListRequest, ObjectMeta, STORED_HEADERS,
};

/// A service that answers S3's read requests.
#[async_trait::async_trait]
pub trait ObjectStore: Send + Sync + 'static {
    /// Who answers (an endpoint URL, a test double's name), for messages.
    fn name(&self) -> &str;
    /// `HEAD` of an object: its size and ETag, honouring `If-Match`.
    async fn head(&self, req: &GetObject) -> Result<ObjectMeta, StoreError>;
    /// `GET` of an object or a range of it, streamed, honouring `If-Match`.
    async fn get_range(&self, req: &GetObject) -> Result<GetResponse, StoreError>;
    /// One page of `ListObjectsV2`.
    async fn list_page(&self, req: &ListRequest) -> Result<ListPage, StoreError>;
}

/// A shared store is a store.
#[async_trait::async_trait]
impl<T: ObjectStore + ?Sized> ObjectStore for std::sync::Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    async fn head(&self, req: &GetObject) -> Result<ObjectMeta, StoreError> {
        (**self).head(req).await
    }
    async fn get_range(&self, req: &GetObject) -> Result<GetResponse, StoreError> {
        (**self).get_range(req).await
    }
    async fn list_page(&self, req: &ListRequest) -> Result<ListPage, StoreError> {
        (**self).list_page(req).await
    }
}

/// Reads the whole body of `resp`; errors if it ends short.
pub async fn collect(resp: GetResponse) -> Result<Bytes, StoreError> {
    let want = (resp.end - resp.start) as usize;
    let mut body = resp.body;
    let mut buf = bytes::BytesMut::with_capacity(want);
    while let Some(chunk) = body.next().await {
        buf.extend_from_slice(&chunk?);
    }
    if buf.len() != want {
        return Err(StoreError::ShortBody {
            got: buf.len() as u64,
            want: want as u64,
        });
    }
    Ok(buf.freeze())
}

/// `GET` of `req` collected into one buffer. A body cut off midway is resumed from
/// where it stopped (a ranged GET for the rest, pinned to the ETag first seen, so
/// the bytes are of one version), up to `attempts` requests in all.
pub async fn get_bytes(
    store: &dyn ObjectStore,
    req: &GetObject,
    attempts: u32,
) -> Result<(ObjectMeta, Bytes), StoreError> {
    let first = store.get_range(req).await?;
    let meta = first.meta.clone();
    let (start, end) = (first.start, first.end);
    let mut buf = bytes::BytesMut::with_capacity((end - start) as usize);
    let mut resp = first;
    let mut tries = 1;
    loop {
        let mut body = resp.body;
        let mut failed = None;
        while let Some(chunk) = body.next().await {
            match chunk {
                Ok(c) => buf.extend_from_slice(&c),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let at = start + buf.len() as u64;
        match failed {
            None if at == end => return Ok((meta, buf.freeze())),
            None => {
                return Err(StoreError::ShortBody {
                    got: at - start,
                    want: end - start,
                })
            }
            Some(e) if !e.is_retryable() || tries >= attempts.max(1) => return Err(e),
            Some(e) => {
                tracing::debug!(store = store.name(), at, "body cut off, resuming: {e}");
                tries += 1;
                let mut rest = req.clone();
                rest.range = Some(ByteRange::span(at, end));
                rest.if_match = Some(meta.etag.clone());
                resp = store.get_range(&rest).await?;
                if resp.start != at || resp.end != end || resp.meta.etag != meta.etag {
                    return Err(StoreError::Protocol {
                        endpoint: store.name().to_owned(),
                        message: format!(
                            "resumed body is {}..{} of {:?}, not {at}..{end} of {:?}",
                            resp.start, resp.end, resp.meta.etag, meta.etag
                        ),
                    });
                }
            }
        }
    }
}

/// Every page of a listing, concatenated.
pub async fn list_all(
    store: &dyn ObjectStore,
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
) -> Result<ListPage, StoreError> {
    let mut all = ListPage::default();
    let mut req = ListRequest {
        bucket: bucket.into(),
        prefix: prefix.into(),
        delimiter: delimiter.map(str::to_owned),
        ..Default::default()
    };
    loop {
        let page = store.list_page(&req).await?;
        all.objects.extend(page.objects);
        all.common_prefixes.extend(page.common_prefixes);
        match page.next_continuation_token {
            Some(t) => req.continuation_token = Some(t),
            None => return Ok(all),
        }
    }
}
