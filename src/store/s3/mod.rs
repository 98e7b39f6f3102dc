//! [`S3Client`]: the [`ObjectStore`] that speaks S3 over HTTP, to the origin bucket
//! and (with cluster credentials) to cache nodes.
//!
//! Every request has a connect, first-byte and body-stall deadline; idempotent
//! requests are retried with jittered exponential backoff on 5xx, throttling and
//! transport errors. Keys are sent bytes-exact. One file per operation family
//! (`object.rs`, `list.rs`, `write.rs`); all of them build their requests with
//! one call builder (`call.rs`) and send them one way (`send.rs`); S3's error
//! answers are mapped in `errors.rs`. GETs whose bodies go into a caller's
//! buffer take `socket.rs` where the endpoint is plain HTTP with no proxy
//! between.

mod call;
mod chunked;
mod encode;
mod errors;
mod list;
mod object;
mod options;
mod send;
mod sign;
mod signatures;
mod socket;
mod write;
mod xml;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::Method;

use super::{GetObject, GetResponse, ListPage, ListRequest, ObjectMeta, ObjectStore, StoreError};
use crate::aws::credentials::{CredentialMode, CredentialSource};

pub use encode::{key_problem, path as encode_path, query_value};
pub use options::{
    Addressing, RequestOptions, RetryPolicy, S3ClientOptions, SseCustomerKey, Throttling, Timeouts,
};
pub use sign::{Payload, Signer};
pub use socket::SocketBody;

/// The parsers of what an S3 server sends back, public so that the fuzz targets
/// reach exactly the code the client runs.
pub mod parse {
    pub use super::chunked::{dechunk, Chunks};
    pub use super::object::parse_content_range as content_range;
    pub use super::socket::head::{
        parse as answer_head, Framing, Head, HeadError, HeadReader, BUF as HEAD_BUF, MAX_HEAD,
    };
    pub use super::xml::{
        parse_error as error_body, parse_list as list_objects, CommonPrefix, Contents, ErrorBody,
        ListBucketResult,
    };
}

/// An answer passed through as it came ([`S3Client::forward`]).
pub struct Forwarded {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: super::ByteStream,
}

/// An S3 client for one endpoint. Cheap to clone; clones share the connection pool.
#[derive(Clone)]
pub struct S3Client {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    /// Connections for GETs read straight into a caller's buffer; `None` where
    /// the endpoint is reached through TLS, a proxy, or AWS's region routing.
    sockets: Option<Arc<socket::Sockets>>,
    opts: S3ClientOptions,
    /// `None`: anonymous, unsigned.
    creds: Option<Arc<CredentialSource>>,
    label: String,
    /// Buckets found in another region than `opts.region` (AWS endpoints only).
    regions: Mutex<HashMap<String, String>>,
    signatures: signatures::Signatures,
    /// What every request of this client (and its clones) asks of the origin.
    budget: Option<Arc<crate::store::budget::Budget>>,
}

impl S3Client {
    pub fn new(opts: S3ClientOptions) -> Result<S3Client, StoreError> {
        let label = opts.endpoint.as_str().trim_end_matches('/').to_owned();
        let failed = |message: String| StoreError::Transport {
            endpoint: label.clone(),
            message,
        };
        let b = crate::net::client_builder(&opts.network, opts.timeouts.connect)
            .map_err(failed)?
            .pool_max_idle_per_host(opts.pool_idle_per_host)
            .pool_idle_timeout(Duration::from_secs(60));
        let http = b
            .build()
            .map_err(|e| failed(format!("cannot build HTTP client: {e}")))?;
        let creds = match &opts.credentials {
            CredentialMode::Keys(c) => Some(CredentialSource::fixed(c)),
            CredentialMode::Anonymous => None,
            CredentialMode::Chain { profile } => Some(
                CredentialSource::chain(
                    profile.as_deref(),
                    &opts.region,
                    &opts.network,
                    opts.timeouts.first_byte,
                )
                .map_err(failed)?,
            ),
        };
        let sockets = plain_http(&opts).then(|| {
            Arc::new(socket::Sockets::new(
                opts.pool_idle_per_host,
                opts.timeouts.connect,
                opts.timeouts.stall,
                label.clone(),
            ))
        });
        let budget = opts
            .throttling
            .map(|t| crate::store::budget::Budget::new(t.limits));
        Ok(S3Client {
            inner: Arc::new(Inner {
                budget,
                http,
                sockets,
                opts,
                creds,
                label,
                regions: Mutex::new(HashMap::new()),
                signatures: Default::default(),
            }),
        })
    }

    /// The origin budget its requests share, if it has one (for its metrics).
    pub fn budget(&self) -> Option<&Arc<crate::store::budget::Budget>> {
        self.inner.budget.as_ref()
    }

    /// Whether GETs into a caller's buffer are read straight off the socket.
    pub fn reads_sockets(&self) -> bool {
        self.inner.sockets.is_some()
    }

    pub fn endpoint(&self) -> &str {
        &self.inner.label
    }

    pub fn options(&self) -> &S3ClientOptions {
        &self.inner.opts
    }

    /// Fetches credentials now (they are otherwise fetched at the first request):
    /// a program checks at start that it has some, with the error naming what was
    /// tried.
    pub async fn check_credentials(&self) -> Result<(), StoreError> {
        self.credentials().await.map(|_| ())
    }

    /// The region requests for `bucket` are signed for.
    pub fn region_of(&self, bucket: &str) -> String {
        self.inner
            .regions
            .lock()
            .unwrap()
            .get(bucket)
            .cloned()
            .unwrap_or_else(|| self.inner.opts.region.clone())
    }

    /// `GET` of an object or range, collected into one buffer; a body cut off
    /// midway is resumed, up to the retry policy's attempts ([`super::get_bytes`]).
    pub async fn get_bytes(&self, req: &GetObject) -> Result<(ObjectMeta, Bytes), StoreError> {
        super::get_bytes(self, req, self.inner.opts.retry.max_attempts).await
    }

    /// Every page of a listing, concatenated.
    pub async fn list_all(
        &self,
        bucket: &str,
        prefix: &str,
        delimiter: Option<&str>,
    ) -> Result<ListPage, StoreError> {
        super::list_all(self, bucket, prefix, delimiter).await
    }

    /// A request passed on for someone else: to `bucket/key` (`""` for the bucket
    /// or the service), signed with this client's credentials, with `query`
    /// (decoded name and value pairs) and `headers` (signed), and answered with
    /// whatever the service said, error statuses too; the body streams.
    pub async fn forward(
        &self,
        method: Method,
        bucket: &str,
        key: &str,
        query: Vec<(String, String)>,
        headers: Vec<(&'static str, String)>,
    ) -> Result<Forwarded, StoreError> {
        let headers = headers.into_iter().map(|(k, v)| (k.into(), v)).collect();
        self.forward_call(method, bucket, key, query, headers, Bytes::new())
            .await
    }

    /// A write passed on for someone else ([`forward`](Self::forward) with a
    /// body and headers named at run time: `x-amz-copy-source`, `x-amz-meta-*`):
    /// sent once, as a client's write is not the passer-on's to repeat.
    pub async fn forward_write(
        &self,
        method: Method,
        bucket: &str,
        key: &str,
        query: Vec<(String, String)>,
        headers: Vec<(String, String)>,
        body: Bytes,
    ) -> Result<Forwarded, StoreError> {
        let headers = headers.into_iter().map(|(k, v)| (k.into(), v)).collect();
        self.forward_call(method, bucket, key, query, headers, body)
            .await
    }

    async fn forward_call(
        &self,
        method: Method,
        bucket: &str,
        key: &str,
        query: Vec<(String, String)>,
        headers: Vec<(std::borrow::Cow<'static, str>, String)>,
        body: Bytes,
    ) -> Result<Forwarded, StoreError> {
        if !key.is_empty() {
            self.check_key(key)?;
        }
        let q = encode::query_string(query.iter().map(|(k, v)| (k.as_str(), v.clone())).collect());
        let writes = method != Method::GET && method != Method::HEAD;
        let mut c = call::Call::new(method, bucket, key).query(q).body(body);
        if writes {
            c = c.once();
        }
        c.signed = headers;
        c.raw = true;
        let resp = self.execute(c).await?;
        Ok(Forwarded {
            status: resp.status().as_u16(),
            headers: resp.headers().clone(),
            body: send::body_stream(
                resp,
                self.inner.opts.timeouts.stall,
                self.inner.label.clone(),
            ),
        })
    }

    /// A request outside S3's own operations (a protocol on top of it, such as a
    /// node's purge), signed like any other; returns the body of the answer.
    pub async fn request(
        &self,
        method: Method,
        bucket: &str,
        query: String,
        body: Bytes,
    ) -> Result<Bytes, StoreError> {
        self.small(call::Call::new(method, bucket, "").query(query).body(body))
            .await
    }
}

#[async_trait::async_trait]
impl ObjectStore for S3Client {
    fn name(&self) -> &str {
        &self.inner.label
    }
    fn budget(&self) -> Option<&Arc<crate::store::budget::Budget>> {
        S3Client::budget(self)
    }
    async fn head(&self, req: &GetObject) -> Result<ObjectMeta, StoreError> {
        self.head_object(req).await
    }
    async fn get_range(&self, req: &GetObject) -> Result<GetResponse, StoreError> {
        self.get_object(req).await
    }
    async fn get_body(&self, req: &GetObject) -> Result<super::BodyResponse, StoreError> {
        self.get_object_body(req).await
    }
    async fn list_page(&self, req: &ListRequest) -> Result<ListPage, StoreError> {
        self.list_objects_v2(req).await
    }
    async fn head_bucket(&self, bucket: &str) -> Result<(), StoreError> {
        S3Client::head_bucket(self, bucket).await
    }
}

/// Whether `opts` reach their endpoint over plain HTTP with no proxy and no
/// region routing: what the socket transport can carry.
fn plain_http(opts: &S3ClientOptions) -> bool {
    use crate::net::Proxy;
    let proxied = match &opts.network.proxy {
        Proxy::Off => false,
        Proxy::Url(_) => true,
        // What reqwest would read for an http:// URL.
        Proxy::FromEnv => ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"]
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty())),
    };
    opts.endpoint.scheme() == "http" && !proxied && opts.aws.is_none()
}
