//! [`S3Client`]: requests, signing, deadlines, retries and response mapping.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderMap, Method, StatusCode};

use super::encode;
use super::error::{Deadline, ErrorContext, S3Error};
use super::sign::{Payload, Signer};
use super::xml;
use super::{
    unquote_etag, ByteStream, GetObject, GetResponse, ListEntry, ListPage, ListRequest, ObjectMeta,
};
use crate::config::{Addressing, CredentialMode, OriginConfig, RetryPolicy, Timeouts};

/// What a purge drops.
#[derive(Clone, Copy, Debug)]
pub enum Purge<'a> {
    Key(&'a str),
    Prefix(&'a str),
    /// Every version of a key but one (after an overwrite whose new version may
    /// already be warm).
    KeyExcept(&'a str, &'a str),
}

impl Purge<'_> {
    /// As query parameters (`key=K`, `prefix=P`, `key=K&keep=ETAG`), encoded.
    fn params(&self) -> String {
        match self {
            Purge::Key(k) => format!("key={}", encode::query_value(k)),
            Purge::Prefix(p) => format!("prefix={}", encode::query_value(p)),
            Purge::KeyExcept(k, e) => format!(
                "keep={}&key={}",
                encode::query_value(e),
                encode::query_value(k)
            ),
        }
    }
}

/// Everything that shapes a client.
#[derive(Clone, Debug)]
pub struct S3ClientOptions {
    pub endpoint: url::Url,
    pub region: String,
    pub addressing: Addressing,
    pub credentials: CredentialMode,
    pub timeouts: Timeouts,
    pub retry: RetryPolicy,
    /// Sign `Range` too. Off for requests to cache nodes, which widen ranges.
    pub sign_range: bool,
    /// Idle pooled connections kept per host.
    pub pool_idle_per_host: usize,
}

impl S3ClientOptions {
    pub fn from_origin(o: &OriginConfig) -> Self {
        Self {
            endpoint: o.endpoint.clone(),
            region: o.region.clone(),
            addressing: o.addressing,
            credentials: o.credentials.clone(),
            timeouts: o.timeouts,
            retry: o.retry,
            sign_range: true,
            pool_idle_per_host: 64,
        }
    }
}

/// An S3 client for one endpoint. Cheap to clone; clones share the connection pool.
#[derive(Clone)]
pub struct S3Client {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    opts: S3ClientOptions,
    signer: Option<Signer>,
    label: String,
}

/// A request before signing.
struct Call<'a> {
    method: Method,
    bucket: &'a str,
    key: &'a str,
    query: String,
    signed: Vec<(&'static str, String)>,
    unsigned: Vec<(&'static str, String)>,
    body: Bytes,
    range: Option<String>,
    retry: bool,
}

impl S3Client {
    pub fn new(opts: S3ClientOptions) -> Result<S3Client, S3Error> {
        let label = opts.endpoint.as_str().trim_end_matches('/').to_owned();
        let http = reqwest::Client::builder()
            .connect_timeout(opts.timeouts.connect)
            .pool_max_idle_per_host(opts.pool_idle_per_host)
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            .no_proxy()
            .build()
            .map_err(|e| S3Error::Transport {
                endpoint: label.clone(),
                message: format!("cannot build HTTP client: {e}"),
            })?;
        let signer = match &opts.credentials {
            CredentialMode::Keys(c) => Some(Signer::new(c, &opts.region)),
            CredentialMode::Anonymous => None,
        };
        Ok(S3Client {
            inner: Arc::new(Inner {
                http,
                opts,
                signer,
                label,
            }),
        })
    }

    pub fn from_origin(o: &OriginConfig) -> Result<S3Client, S3Error> {
        Self::new(S3ClientOptions::from_origin(o))
    }

    pub fn endpoint(&self) -> &str {
        &self.inner.label
    }

    pub fn options(&self) -> &S3ClientOptions {
        &self.inner.opts
    }

    /// `HEAD` of an object: its size and ETag.
    pub async fn head_object(&self, req: &GetObject) -> Result<ObjectMeta, S3Error> {
        let call = self.object_call(Method::HEAD, req)?;
        let resp = self.execute(call).await?;
        meta_from_headers(resp.headers(), &self.inner.label).map(|(m, _, _)| m)
    }

    /// `GET` of an object or a range of it, streamed.
    pub async fn get_object(&self, req: &GetObject) -> Result<GetResponse, S3Error> {
        let call = self.object_call(Method::GET, req)?;
        let resp = self.execute(call).await?;
        let (meta, start, end) = meta_from_headers(resp.headers(), &self.inner.label)?;
        let body = body_stream(
            resp,
            self.inner.opts.timeouts.stall,
            self.inner.label.clone(),
        );
        Ok(GetResponse {
            meta,
            start,
            end,
            body,
        })
    }

    /// `GET` of an object or range, collected into one buffer. A body cut off midway
    /// is fetched again (up to the retry policy's attempts), pinned to the ETag first
    /// seen so the bytes are of one version.
    pub async fn get_bytes(&self, req: &GetObject) -> Result<(ObjectMeta, Bytes), S3Error> {
        let max = self.inner.opts.retry.max_attempts.max(1);
        let mut req = req.clone();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let r = self.get_object(&req).await?;
            let meta = r.meta.clone();
            match r.collect().await {
                Ok(b) => return Ok((meta, b)),
                Err(e) if e.is_retryable() && attempt < max => {
                    tracing::debug!(endpoint = %self.inner.label, attempt, "body failed, fetching again: {e}");
                    req.if_match.get_or_insert(meta.etag);
                    tokio::time::sleep(backoff(&self.inner.opts.retry, attempt)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One page of `ListObjectsV2`.
    pub async fn list_objects_v2(&self, req: &ListRequest) -> Result<ListPage, S3Error> {
        let mut q: Vec<(&str, String)> = vec![("list-type", "2".into())];
        if let Some(t) = &req.continuation_token {
            q.push(("continuation-token", t.clone()));
        }
        if let Some(d) = &req.delimiter {
            q.push(("delimiter", d.clone()));
        }
        if let Some(m) = req.max_keys {
            q.push(("max-keys", m.to_string()));
        }
        q.push(("prefix", req.prefix.clone()));
        if let Some(s) = &req.start_after {
            q.push(("start-after", s.clone()));
        }
        // Canonical order (sorted by name) so the signed and sent queries agree.
        q.sort();
        let query = q
            .iter()
            .map(|(k, v)| format!("{k}={}", encode::query_value(v)))
            .collect::<Vec<_>>()
            .join("&");
        let body = self
            .small_call(Method::GET, &req.bucket, "", query, Bytes::new(), true)
            .await?;
        let parsed = xml::parse_list(&body).map_err(|m| protocol(&self.inner.label, m))?;
        let objects = parsed
            .contents
            .into_iter()
            .map(|c| ListEntry {
                key: c.key,
                size: c.size,
                etag: c.etag.as_deref().map(unquote_etag).unwrap_or("").to_owned(),
                last_modified: c.last_modified.as_deref().and_then(parse_iso8601),
            })
            .collect();
        Ok(ListPage {
            objects,
            common_prefixes: parsed
                .common_prefixes
                .into_iter()
                .map(|p| p.prefix)
                .collect(),
            next_continuation_token: if parsed.is_truncated {
                parsed.next_continuation_token
            } else {
                None
            },
        })
    }

    /// Every page of a listing, concatenated.
    pub async fn list_all(
        &self,
        bucket: &str,
        prefix: &str,
        delimiter: Option<&str>,
    ) -> Result<ListPage, S3Error> {
        let mut all = ListPage::default();
        let mut req = ListRequest {
            bucket: bucket.into(),
            prefix: prefix.into(),
            delimiter: delimiter.map(str::to_owned),
            ..Default::default()
        };
        loop {
            let page = self.list_objects_v2(&req).await?;
            all.objects.extend(page.objects);
            all.common_prefixes.extend(page.common_prefixes);
            match page.next_continuation_token {
                Some(t) => req.continuation_token = Some(t),
                None => return Ok(all),
            }
        }
    }

    /// The buckets the credentials may see, with their creation times.
    pub async fn list_buckets(&self) -> Result<Vec<(String, Option<SystemTime>)>, S3Error> {
        let body = self
            .small_call(Method::GET, "", "", String::new(), Bytes::new(), true)
            .await?;
        let parsed = xml::parse_as::<xml::ListAllMyBucketsResult>(&body)
            .map_err(|m| protocol(&self.inner.label, m))?;
        Ok(parsed
            .buckets
            .bucket
            .into_iter()
            .map(|b| {
                let created = b.creation_date.as_deref().and_then(parse_iso8601);
                (b.name, created)
            })
            .collect())
    }

    /// `HEAD` of a bucket: does it exist and may we read it.
    pub async fn head_bucket(&self, bucket: &str) -> Result<(), S3Error> {
        let call = Call {
            method: Method::HEAD,
            bucket,
            key: "",
            query: String::new(),
            signed: vec![],
            unsigned: vec![],
            body: Bytes::new(),
            range: None,
            retry: true,
        };
        self.execute(call).await.map(drop)
    }

    /// A single-request `PUT`; returns the new ETag.
    pub async fn put_object(
        &self,
        bucket: &str,
        key: &str,
        body: Bytes,
    ) -> Result<String, S3Error> {
        self.check_key(key)?;
        let call = Call {
            method: Method::PUT,
            bucket,
            key,
            query: String::new(),
            signed: vec![],
            unsigned: vec![],
            body,
            range: None,
            // A PUT of the same bytes is idempotent.
            retry: true,
        };
        let resp = self.execute(call).await?;
        Ok(etag_header(&resp))
    }

    /// Starts a multipart upload; returns its upload id.
    pub async fn create_multipart_upload(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<String, S3Error> {
        self.check_key(key)?;
        let body = self
            .small_call(
                Method::POST,
                bucket,
                key,
                "uploads=".into(),
                Bytes::new(),
                false,
            )
            .await?;
        xml::parse_as::<xml::InitiateMultipartUploadResult>(&body)
            .map(|r| r.upload_id)
            .map_err(|m| protocol(&self.inner.label, m))
    }

    /// Uploads part `number` of an upload; returns the part's ETag.
    pub async fn upload_part(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        number: i32,
        body: Bytes,
    ) -> Result<String, S3Error> {
        self.check_key(key)?;
        let call = Call {
            method: Method::PUT,
            bucket,
            key,
            query: format!(
                "partNumber={number}&uploadId={}",
                encode::query_value(upload_id)
            ),
            signed: vec![],
            unsigned: vec![],
            body,
            range: None,
            // The same part again replaces it: idempotent.
            retry: true,
        };
        let resp = self.execute(call).await?;
        Ok(etag_header(&resp))
    }

    /// Completes an upload from its parts (number, ETag), ascending; returns the
    /// object's ETag.
    pub async fn complete_multipart_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[(i32, String)],
    ) -> Result<String, S3Error> {
        self.check_key(key)?;
        let mut xml_body = String::from("<CompleteMultipartUpload>");
        for (n, etag) in parts {
            xml_body.push_str(&format!(
                "<Part><PartNumber>{n}</PartNumber><ETag>\"{}\"</ETag></Part>",
                quick_xml::escape::escape(unquote_etag(etag))
            ));
        }
        xml_body.push_str("</CompleteMultipartUpload>");
        let body = self
            .small_call(
                Method::POST,
                bucket,
                key,
                format!("uploadId={}", encode::query_value(upload_id)),
                Bytes::from(xml_body),
                false,
            )
            .await?;
        // S3 may answer 200 and still fail the completion in the body.
        if let Ok(e) = xml::parse_as::<xml::ErrorBody>(&body) {
            if let Some(code) = e.code {
                return Err(S3Error::from_response(
                    500,
                    Some(code),
                    e.message,
                    &ErrorContext {
                        bucket,
                        key,
                        range: None,
                    },
                ));
            }
        }
        xml::parse_as::<xml::CompleteMultipartUploadResult>(&body)
            .map(|r| unquote_etag(&r.etag).to_owned())
            .map_err(|m| protocol(&self.inner.label, m))
    }

    pub async fn abort_multipart_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(), S3Error> {
        self.check_key(key)?;
        self.small_call(
            Method::DELETE,
            bucket,
            key,
            format!("uploadId={}", encode::query_value(upload_id)),
            Bytes::new(),
            true,
        )
        .await
        .map(drop)
    }

    async fn small_call(
        &self,
        method: Method,
        bucket: &str,
        key: &str,
        query: String,
        body: Bytes,
        retry: bool,
    ) -> Result<Bytes, S3Error> {
        let call = Call {
            method,
            bucket,
            key,
            query,
            signed: vec![],
            unsigned: vec![],
            body,
            range: None,
            retry,
        };
        let resp = self.execute(call).await?;
        read_small_body(resp, self.inner.opts.timeouts.stall, &self.inner.label).await
    }

    pub async fn delete_object(&self, bucket: &str, key: &str) -> Result<(), S3Error> {
        self.check_key(key)?;
        let call = Call {
            method: Method::DELETE,
            bucket,
            key,
            query: String::new(),
            signed: vec![],
            unsigned: vec![],
            body: Bytes::new(),
            range: None,
            retry: true,
        };
        self.execute(call).await.map(drop)
    }

    /// Asks a shoal node to drop what it caches of one key or of every key under a
    /// prefix (`POST /BUCKET?shoal-purge&key=K|prefix=P`), and to pass the purge on
    /// to every node it knows unless `local`; returns the node's JSON answer.
    pub async fn purge(
        &self,
        bucket: &str,
        target: Purge<'_>,
        local: bool,
    ) -> Result<String, S3Error> {
        let mut query = format!("{}&shoal-purge=", target.params());
        if local {
            query.push_str("&shoal-local=");
        }
        self.purge_call(bucket, query, Bytes::new()).await
    }

    /// Many purges of one bucket in one request, applied by the node itself only
    /// (how nodes pass invalidations on to each other): one `key=K` or `prefix=P`
    /// per body line (`key=K&keep=E` for all versions but one), values
    /// percent-encoded.
    pub async fn purge_batch(&self, bucket: &str, items: &[Purge<'_>]) -> Result<String, S3Error> {
        let mut body = String::new();
        for item in items {
            body.push_str(&item.params());
            body.push('\n');
        }
        self.purge_call(
            bucket,
            "shoal-local=&shoal-purge=".into(),
            Bytes::from(body),
        )
        .await
    }

    async fn purge_call(
        &self,
        bucket: &str,
        query: String,
        body: Bytes,
    ) -> Result<String, S3Error> {
        let body = self
            .small_call(Method::POST, bucket, "", query, body, true)
            .await?;
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    /// A presigned GET URL for `bucket/key`, valid for `expires`.
    pub fn presign_get(
        &self,
        bucket: &str,
        key: &str,
        expires: Duration,
    ) -> Result<String, S3Error> {
        self.check_key(key)?;
        let (url, host) = self.url(bucket, key, "");
        let signer = self
            .inner
            .signer
            .as_ref()
            .ok_or_else(|| S3Error::AccessDenied {
                message: "cannot presign without credentials".into(),
            })?;
        signer
            .presign("GET", &url, &[("host", &host)], expires, SystemTime::now())
            .map_err(|message| S3Error::Protocol {
                endpoint: self.inner.label.clone(),
                message,
            })
    }

    fn check_key(&self, key: &str) -> Result<(), S3Error> {
        match encode::key_problem(key) {
            Some(reason) => Err(S3Error::InvalidKey {
                key: key.into(),
                reason: reason.into(),
            }),
            None => Ok(()),
        }
    }

    fn object_call<'a>(&self, method: Method, req: &'a GetObject) -> Result<Call<'a>, S3Error> {
        self.check_key(&req.key)?;
        let mut signed = vec![];
        let mut unsigned = vec![];
        if let Some(e) = &req.if_match {
            signed.push(("if-match", format!("\"{}\"", unquote_etag(e))));
        }
        if let Some(e) = &req.if_none_match {
            signed.push(("if-none-match", format!("\"{}\"", unquote_etag(e))));
        }
        if req.cached_only {
            unsigned.push((super::CACHED_ONLY_HEADER, "1".to_owned()));
        }
        if req.hop > 0 {
            unsigned.push((super::HOP_HEADER, req.hop.to_string()));
        }
        let range = req.range.map(|r| r.header());
        if let Some(r) = &range {
            if self.inner.opts.sign_range {
                signed.push(("range", r.clone()));
            } else {
                unsigned.push(("range", r.clone()));
            }
        }
        Ok(Call {
            method,
            bucket: &req.bucket,
            key: &req.key,
            query: String::new(),
            signed,
            unsigned,
            body: Bytes::new(),
            range,
            retry: true,
        })
    }

    /// The encoded URL and the Host header value it implies.
    fn url(&self, bucket: &str, key: &str, query: &str) -> (String, String) {
        let ep = &self.inner.opts.endpoint;
        let host = ep.host_str().unwrap_or_default();
        let port = ep.port().map(|p| format!(":{p}")).unwrap_or_default();
        let (authority, path) = match self.inner.opts.addressing {
            // The service itself (ListBuckets), whatever the addressing.
            _ if bucket.is_empty() => (format!("{host}{port}"), "/".to_owned()),
            Addressing::Path if key.is_empty() => (
                format!("{host}{port}"),
                format!("/{}", encode::path(bucket)),
            ),
            Addressing::Path => (
                format!("{host}{port}"),
                format!("/{}/{}", encode::path(bucket), encode::path(key)),
            ),
            Addressing::Virtual => (
                format!("{bucket}.{host}{port}"),
                format!("/{}", encode::path(key)),
            ),
        };
        let q = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        (format!("{}://{authority}{path}{q}", ep.scheme()), authority)
    }

    /// Sends `call`, retrying idempotent requests, and maps error statuses.
    async fn execute(&self, call: Call<'_>) -> Result<reqwest::Response, S3Error> {
        let policy = self.inner.opts.retry;
        let max = if call.retry {
            policy.max_attempts.max(1)
        } else {
            1
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.attempt(&call).await {
                Ok(r) => return Ok(r),
                Err(e) if e.is_retryable() && attempt < max => {
                    let delay = backoff(&policy, attempt);
                    tracing::debug!(endpoint = %self.inner.label, attempt, ?delay, "retrying after: {e}");
                    tokio::time::sleep(delay).await;
                }
                Err(e) if attempt > 1 => {
                    return Err(S3Error::Exhausted {
                        attempts: attempt,
                        last: Box::new(e),
                    })
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn attempt(&self, call: &Call<'_>) -> Result<reqwest::Response, S3Error> {
        let inner = &*self.inner;
        let (url, host) = self.url(call.bucket, call.key, &call.query);
        let mut headers = HeaderMap::new();
        for (k, v) in call.signed.iter().chain(call.unsigned.iter()) {
            headers.insert(
                *k,
                v.parse()
                    .map_err(|_| protocol(&inner.label, format!("bad header value for {k}")))?,
            );
        }
        if let Some(signer) = &inner.signer {
            let mut to_sign: Vec<(&str, &str)> = vec![("host", host.as_str())];
            to_sign.extend(call.signed.iter().map(|(k, v)| (*k, v.as_str())));
            let payload = if call.method == Method::PUT {
                Payload::Unsigned
            } else {
                Payload::Bytes(&call.body)
            };
            let added = signer
                .sign_headers(
                    call.method.as_str(),
                    &url,
                    &to_sign,
                    payload,
                    SystemTime::now(),
                )
                .map_err(|m| protocol(&inner.label, m))?;
            for (k, v) in added {
                let name: http::HeaderName = k
                    .parse()
                    .map_err(|_| protocol(&inner.label, format!("bad header {k}")))?;
                headers.insert(
                    name,
                    v.parse()
                        .map_err(|_| protocol(&inner.label, format!("bad value for {k}")))?,
                );
            }
        }
        let req = inner
            .http
            .request(call.method.clone(), &url)
            .headers(headers)
            .body(call.body.clone());
        let first_byte = inner.opts.timeouts.first_byte;
        let resp = match tokio::time::timeout(first_byte, req.send()).await {
            Err(_) => {
                return Err(S3Error::Timeout {
                    endpoint: inner.label.clone(),
                    deadline: Deadline::FirstByte,
                    after: first_byte,
                })
            }
            Ok(Err(e)) => {
                return Err(transport_error(
                    &inner.label,
                    &e,
                    inner.opts.timeouts.connect,
                ))
            }
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let ctx = ErrorContext {
            bucket: call.bucket,
            key: call.key,
            range: call.range.as_deref(),
        };
        if status == StatusCode::NOT_MODIFIED || call.method == Method::HEAD {
            return Err(S3Error::from_response(status.as_u16(), None, None, &ctx));
        }
        let body = read_small_body(resp, inner.opts.timeouts.stall, &inner.label)
            .await
            .unwrap_or_default();
        let parsed = xml::parse_error(&body);
        Err(S3Error::from_response(
            status.as_u16(),
            parsed.code,
            parsed.message,
            &ctx,
        ))
    }
}

fn protocol(endpoint: &str, message: String) -> S3Error {
    S3Error::Protocol {
        endpoint: endpoint.to_owned(),
        message,
    }
}

fn transport_error(endpoint: &str, e: &reqwest::Error, connect_timeout: Duration) -> S3Error {
    // reqwest wraps the root cause; show all of it.
    let mut message = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        message.push_str(": ");
        message.push_str(&s.to_string());
        src = s.source();
    }
    if e.is_connect() && e.is_timeout() {
        S3Error::Timeout {
            endpoint: endpoint.to_owned(),
            deadline: Deadline::Connect,
            after: connect_timeout,
        }
    } else if e.is_connect() {
        S3Error::Connect {
            endpoint: endpoint.to_owned(),
            message,
        }
    } else {
        S3Error::Transport {
            endpoint: endpoint.to_owned(),
            message,
        }
    }
}

/// Full jitter: a random wait up to `base * 2^(attempt-1)`, capped at `max`.
fn backoff(p: &RetryPolicy, attempt: u32) -> Duration {
    let ceiling = p
        .base
        .saturating_mul(1u32 << (attempt - 1).min(16))
        .min(p.max);
    let ms = ceiling.as_millis().max(1) as u64;
    Duration::from_millis(rand::random_range(ms / 4..=ms))
}

/// Reads a body expected to be small (XML) within the stall deadline per chunk.
async fn read_small_body(
    resp: reqwest::Response,
    stall: Duration,
    endpoint: &str,
) -> Result<Bytes, S3Error> {
    let mut s = body_stream(resp, stall, endpoint.to_owned());
    let mut buf = bytes::BytesMut::new();
    while let Some(c) = s.next().await {
        buf.extend_from_slice(&c?);
        if buf.len() > 64 << 20 {
            return Err(protocol(endpoint, "response body over 64 MiB".into()));
        }
    }
    Ok(buf.freeze())
}

/// The response body as a stream that fails if no bytes come for `stall`.
pub(crate) fn body_stream(
    resp: reqwest::Response,
    stall: Duration,
    endpoint: String,
) -> ByteStream {
    let inner = resp.bytes_stream();
    Box::pin(futures_util::stream::unfold(
        Some(Box::pin(inner)),
        move |state| {
            let endpoint = endpoint.clone();
            async move {
                let mut s = state?;
                match tokio::time::timeout(stall, s.next()).await {
                    Err(_) => Some((
                        Err(S3Error::Timeout {
                            endpoint,
                            deadline: Deadline::Stall,
                            after: stall,
                        }),
                        None,
                    )),
                    Ok(None) => None,
                    Ok(Some(Ok(b))) => Some((Ok(b), Some(s))),
                    Ok(Some(Err(e))) => Some((
                        Err(S3Error::Transport {
                            endpoint,
                            message: format!("body cut off: {e}"),
                        }),
                        None,
                    )),
                }
            }
        },
    ))
}

/// Size, ETag and the carried range from GET/HEAD response headers.
fn meta_from_headers(h: &HeaderMap, endpoint: &str) -> Result<(ObjectMeta, u64, u64), S3Error> {
    let get = |n: http::HeaderName| h.get(n).and_then(|v| v.to_str().ok());
    let len: u64 = get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| protocol(endpoint, "response has no Content-Length".into()))?;
    let (start, end, size) = match get(http::header::CONTENT_RANGE) {
        Some(cr) => parse_content_range(cr)
            .ok_or_else(|| protocol(endpoint, format!("bad Content-Range {cr:?}")))?,
        None => (0, len, len),
    };
    if end - start != len {
        return Err(protocol(
            endpoint,
            format!("Content-Length {len} does not match Content-Range {start}..{end}"),
        ));
    }
    let etag = get(http::header::ETAG)
        .map(|v| unquote_etag(v).to_owned())
        .ok_or_else(|| protocol(endpoint, "response has no ETag".into()))?;
    Ok((
        ObjectMeta {
            size,
            etag,
            last_modified: get(http::header::LAST_MODIFIED)
                .and_then(|v| httpdate::parse_http_date(v).ok()),
            content_type: get(http::header::CONTENT_TYPE).map(str::to_owned),
        },
        start,
        end,
    ))
}

/// The unquoted `ETag` of an answer (empty if it has none).
fn etag_header(resp: &reqwest::Response) -> String {
    resp.headers()
        .get(http::header::ETAG)
        .and_then(|v| v.to_str().ok())
        .map(|v| unquote_etag(v).to_owned())
        .unwrap_or_default()
}

/// `bytes a-b/total` as `(a, b + 1, total)`.
pub fn parse_content_range(v: &str) -> Option<(u64, u64, u64)> {
    let rest = v.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (a, b) = range.split_once('-')?;
    let (a, b, total): (u64, u64, u64) = (a.parse().ok()?, b.parse().ok()?, total.parse().ok()?);
    (a <= b && b < total).then_some((a, b + 1, total))
}

/// `2024-01-02T03:04:05.000Z` as a time.
fn parse_iso8601(s: &str) -> Option<SystemTime> {
    let s = s.trim();
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>());
    let (y, mo, da) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let time = time.trim_end_matches('Z');
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|x| x.parse::<i64>());
    let (h, mi, se) = (t.next()?.ok()?, t.next()?.ok()?, t.next()?.ok()?);
    // Days from civil (Howard Hinnant's algorithm).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = if y2 >= 0 { y2 } else { y2 - 399 } / 400;
    let yoe = y2 - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + da - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    let secs = days * 86400 + h * 3600 + mi * 60 + se;
    let millis: u64 = format!("{frac:0<3}")[..3].parse().ok()?;
    let secs = u64::try_from(secs).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range() {
        assert_eq!(parse_content_range("bytes 0-9/100"), Some((0, 10, 100)));
        assert_eq!(parse_content_range("bytes 99-99/100"), Some((99, 100, 100)));
        assert_eq!(parse_content_range("bytes 5-4/100"), None);
        assert_eq!(parse_content_range("bytes 0-100/100"), None);
        assert_eq!(parse_content_range("bytes */100"), None);
    }

    #[test]
    fn iso8601() {
        let t = parse_iso8601("2024-01-02T03:04:05.250Z").unwrap();
        assert_eq!(httpdate::fmt_http_date(t), "Tue, 02 Jan 2024 03:04:05 GMT");
        assert_eq!(
            t.duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .subsec_millis(),
            250
        );
        assert!(parse_iso8601("yesterday").is_none());
    }

    #[test]
    fn backoff_is_capped() {
        let p = RetryPolicy {
            max_attempts: 10,
            base: Duration::from_millis(50),
            max: Duration::from_secs(2),
        };
        for a in 1..12 {
            assert!(backoff(&p, a) <= Duration::from_secs(2));
        }
    }
}
