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

mod body;
pub mod budget;
mod error;
pub mod faults;
pub mod memory;
pub mod pipe;
pub mod s3;
pub mod seen;
mod stall;
mod types;

use bytes::Bytes;
use futures_util::StreamExt;

pub use body::{Body, BodyResponse, Spliced};
pub use error::{Deadline, StoreError};
pub use stall::{paced_guard, stall_guard};
pub use types::{
    is_archive_class, is_stored_header, unquote_etag, ByteRange, ByteStream, ExtraHeaders,
    GetObject, GetResponse, ListEntry, ListPage, ListRequest, ObjectMeta, STORED_HEADERS,
};

/// A service that answers S3's read requests.
#[async_trait::async_trait]
pub trait ObjectStore: Send + Sync + 'static {
    /// Who answers (an endpoint URL, a test double's name), for messages.
    fn name(&self) -> &str;
    /// What this process may ask of it, if it keeps a budget (an origin does).
    fn budget(&self) -> Option<&std::sync::Arc<budget::Budget>> {
        None
    }
    /// `HEAD` of an object: its size and ETag, honouring `If-Match`.
    async fn head(&self, req: &GetObject) -> Result<ObjectMeta, StoreError>;
    /// `GET` of an object or a range of it, streamed, honouring `If-Match`.
    async fn get_range(&self, req: &GetObject) -> Result<GetResponse, StoreError>;
    /// [`get_range`](Self::get_range) with the body to be read into the caller's
    /// buffer ([`Body::read`]): a store that can put its bytes there without a
    /// copy in between says so here.
    async fn get_body(&self, req: &GetObject) -> Result<BodyResponse, StoreError> {
        self.get_range(req).await.map(BodyResponse::from)
    }
    /// One page of `ListObjectsV2`.
    async fn list_page(&self, req: &ListRequest) -> Result<ListPage, StoreError>;
    /// `HEAD` of a bucket: whether it is there (a HEAD of an object answers a
    /// bare 404 either way).
    async fn head_bucket(&self, bucket: &str) -> Result<(), StoreError>;
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
    async fn get_body(&self, req: &GetObject) -> Result<BodyResponse, StoreError> {
        (**self).get_body(req).await
    }
    async fn list_page(&self, req: &ListRequest) -> Result<ListPage, StoreError> {
        (**self).list_page(req).await
    }
    async fn head_bucket(&self, bucket: &str) -> Result<(), StoreError> {
        (**self).head_bucket(bucket).await
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

/// Where a GET's body goes as it arrives ([`get_into`]): a buffer the body is
/// read into.
pub trait BodySink {
    type Error: From<StoreError>;
    /// A request is about to go out: the first, or one resuming a cut body.
    fn request(&mut self) {}
    /// The first answer, before any of its bytes: a sink that cannot take it (a
    /// version or a span it did not ask for) refuses here.
    fn begin(&mut self, _meta: &ObjectMeta, _start: u64, _end: u64) -> Result<(), Self::Error> {
        Ok(())
    }
    /// Room for the next bytes of the body (at least as much as is still to come).
    fn spare(&mut self) -> &mut [u8];
    /// The next `n` bytes of [`spare`](Self::spare) were written.
    fn commit(&mut self, n: usize);
}

/// `GET` of `req`, its body read into `sink` as it arrives. A body cut off
/// midway is resumed from where it stopped (a ranged GET for the rest, pinned to
/// the ETag first seen, so the bytes are of one version), up to `attempts`
/// requests in all; a resume that fails for a passing reason counts as one of
/// them. An error before any byte (a 412, a 404) is the answer. Returns what the
/// first answer said of the object and the span its body covered.
pub async fn get_into<S: BodySink>(
    store: &dyn ObjectStore,
    req: &GetObject,
    attempts: u32,
    sink: &mut S,
) -> Result<(ObjectMeta, u64, u64), S::Error> {
    sink.request();
    let first = store.get_body(req).await?;
    let meta = first.meta.clone();
    let (start, end) = (first.start, first.end);
    sink.begin(&meta, start, end)?;
    let mut at = start;
    let mut body = Some(first.body);
    let mut tries = 1;
    loop {
        let mut cut = None;
        if let Some(mut b) = body.take() {
            while at < end {
                let room = sink.spare();
                let want = room.len().min((end - at) as usize);
                if want == 0 {
                    return Err(StoreError::Protocol {
                        endpoint: store.name().to_owned(),
                        message: format!("no room for the body of {start}..{end} at {at}"),
                    }
                    .into());
                }
                match b.read(&mut room[..want]).await {
                    Ok(0) => break,
                    Ok(n) => {
                        at += n as u64;
                        sink.commit(n);
                    }
                    Err(e) => {
                        cut = Some(e);
                        break;
                    }
                }
            }
        }
        match cut {
            None if at == end => return Ok((meta, start, end)),
            None => {
                return Err(StoreError::ShortBody {
                    got: at - start,
                    want: end - start,
                }
                .into())
            }
            Some(e) if !e.is_retryable() || tries >= attempts.max(1) => return Err(e.into()),
            Some(e) => {
                tracing::debug!(store = store.name(), at, end, "body cut off, resuming: {e}");
            }
        }
        // Resume until a request gets an answer or the attempts run out.
        loop {
            tries += 1;
            let mut rest = req.clone();
            rest.range = Some(ByteRange::span(at, end));
            rest.if_match = Some(meta.etag.clone());
            sink.request();
            match store.get_body(&rest).await {
                Ok(resp) if resp.start != at || resp.end != end || resp.meta.etag != meta.etag => {
                    return Err(StoreError::Protocol {
                        endpoint: store.name().to_owned(),
                        message: format!(
                            "resumed body is {}..{} of {:?}, not {at}..{end} of {:?}",
                            resp.start, resp.end, resp.meta.etag, meta.etag
                        ),
                    }
                    .into());
                }
                Ok(resp) => {
                    body = Some(resp.body);
                    break;
                }
                Err(e) if !e.is_retryable() || tries >= attempts.max(1) => return Err(e.into()),
                Err(e) => tracing::debug!(store = store.name(), at, "resume failed, again: {e}"),
            }
        }
    }
}

/// `GET` of `req` collected into one buffer, resumed as [`get_into`] does.
pub async fn get_bytes(
    store: &dyn ObjectStore,
    req: &GetObject,
    attempts: u32,
) -> Result<(ObjectMeta, Bytes), StoreError> {
    struct Collect {
        buf: Vec<u8>,
        at: usize,
    }
    impl BodySink for Collect {
        type Error = StoreError;
        fn begin(&mut self, _: &ObjectMeta, start: u64, end: u64) -> Result<(), StoreError> {
            self.buf = vec![0u8; (end - start) as usize];
            Ok(())
        }
        fn spare(&mut self) -> &mut [u8] {
            &mut self.buf[self.at..]
        }
        fn commit(&mut self, n: usize) {
            self.at += n;
        }
    }
    let mut sink = Collect {
        buf: Vec::new(),
        at: 0,
    };
    let (meta, _, _) = get_into(store, req, attempts, &mut sink).await?;
    sink.buf.truncate(sink.at);
    Ok((meta, Bytes::from(sink.buf)))
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
