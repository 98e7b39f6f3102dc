//! One request: built with [`Call`], signed, sent within the deadlines, retried
//! when idempotent, its error answer mapped.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderMap, Method, StatusCode};

use super::errors::{from_response, ErrorContext};
use super::sign::Payload;
use super::{encode, xml, S3Client};
use crate::config::{Addressing, RetryPolicy};
use crate::store::{stall_guard, ByteStream, Deadline, StoreError};

/// A request before signing.
pub(super) struct Call<'a> {
    pub method: Method,
    pub bucket: &'a str,
    pub key: &'a str,
    pub query: String,
    /// Headers covered by the signature.
    pub signed: Vec<(&'static str, String)>,
    /// Headers sent outside it.
    pub unsigned: Vec<(&'static str, String)>,
    pub body: Bytes,
    /// The `Range` header, for error messages.
    pub range: Option<String>,
    pub retry: bool,
    /// Hand back every answer as it came, error statuses too (a request passed
    /// through for someone else, who should see what the service said).
    pub raw: bool,
}

impl<'a> Call<'a> {
    /// A retried, bodiless request of `bucket/key` (`""` for the bucket itself).
    pub fn new(method: Method, bucket: &'a str, key: &'a str) -> Self {
        Call {
            method,
            bucket,
            key,
            query: String::new(),
            signed: vec![],
            unsigned: vec![],
            body: Bytes::new(),
            range: None,
            retry: true,
            raw: false,
        }
    }
    pub fn query(mut self, q: String) -> Self {
        self.query = q;
        self
    }
    pub fn body(mut self, b: Bytes) -> Self {
        self.body = b;
        self
    }
    /// Not idempotent: sent once.
    pub fn once(mut self) -> Self {
        self.retry = false;
        self
    }
}

/// `name=value` pairs as a query string, sorted (the canonical order, so the signed
/// and the sent query agree) and encoded.
pub(super) fn query_string(mut q: Vec<(&str, String)>) -> String {
    q.sort();
    q.iter()
        .map(|(k, v)| format!("{k}={}", encode::query_value(v)))
        .collect::<Vec<_>>()
        .join("&")
}

impl S3Client {
    pub(super) fn protocol(&self, message: String) -> StoreError {
        StoreError::Protocol {
            endpoint: self.inner.label.clone(),
            message,
        }
    }

    pub(super) fn check_key(&self, key: &str) -> Result<(), StoreError> {
        match encode::key_problem(key) {
            Some(reason) => Err(StoreError::InvalidKey {
                key: key.into(),
                reason: reason.into(),
            }),
            None => Ok(()),
        }
    }

    /// The encoded URL and the Host header value it implies.
    pub(super) fn url(&self, bucket: &str, key: &str, query: &str) -> (String, String) {
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

    /// Sends `call` and reads its (small, XML) answer.
    pub(super) async fn small(&self, call: Call<'_>) -> Result<Bytes, StoreError> {
        let resp = self.execute(call).await?;
        read_small_body(resp, self.inner.opts.timeouts.stall, &self.inner.label).await
    }

    /// Sends `call`, retrying idempotent requests, and maps error statuses.
    pub(super) async fn execute(&self, call: Call<'_>) -> Result<reqwest::Response, StoreError> {
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
                    return Err(StoreError::Exhausted {
                        attempts: attempt,
                        last: Box::new(e),
                    })
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn headers(&self, call: &Call<'_>, url: &str, host: &str) -> Result<HeaderMap, StoreError> {
        let inner = &*self.inner;
        let mut headers = HeaderMap::new();
        for (k, v) in call.signed.iter().chain(call.unsigned.iter()) {
            headers.insert(
                *k,
                v.parse()
                    .map_err(|_| self.protocol(format!("bad header value for {k}")))?,
            );
        }
        let Some(signer) = &inner.signer else {
            return Ok(headers);
        };
        let mut to_sign: Vec<(&str, &str)> = vec![("host", host)];
        to_sign.extend(call.signed.iter().map(|(k, v)| (*k, v.as_str())));
        let payload = if call.method == Method::PUT {
            Payload::Unsigned
        } else {
            Payload::Bytes(&call.body)
        };
        let added = signer
            .sign_headers(
                call.method.as_str(),
                url,
                &to_sign,
                payload,
                SystemTime::now(),
            )
            .map_err(|m| self.protocol(m))?;
        for (k, v) in added {
            let name: http::HeaderName = k
                .parse()
                .map_err(|_| self.protocol(format!("bad header {k}")))?;
            headers.insert(
                name,
                v.parse()
                    .map_err(|_| self.protocol(format!("bad value for {k}")))?,
            );
        }
        Ok(headers)
    }

    async fn attempt(&self, call: &Call<'_>) -> Result<reqwest::Response, StoreError> {
        let inner = &*self.inner;
        let (url, host) = self.url(call.bucket, call.key, &call.query);
        let headers = self.headers(call, &url, &host)?;
        let req = inner
            .http
            .request(call.method.clone(), &url)
            .headers(headers)
            .body(call.body.clone());
        let first_byte = inner.opts.timeouts.first_byte;
        let resp = match tokio::time::timeout(first_byte, req.send()).await {
            Err(_) => {
                return Err(StoreError::Timeout {
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
        if status.is_success() || call.raw {
            return Ok(resp);
        }
        let ctx = ErrorContext {
            bucket: call.bucket,
            key: call.key,
            range: call.range.as_deref(),
        };
        if status == StatusCode::NOT_MODIFIED || call.method == Method::HEAD {
            return Err(from_response(status.as_u16(), None, None, &ctx));
        }
        let body = read_small_body(resp, inner.opts.timeouts.stall, &inner.label)
            .await
            .unwrap_or_default();
        let parsed = xml::parse_error(&body);
        Err(from_response(
            status.as_u16(),
            parsed.code,
            parsed.message,
            &ctx,
        ))
    }
}

fn transport_error(endpoint: &str, e: &reqwest::Error, connect_timeout: Duration) -> StoreError {
    // reqwest wraps the root cause; show all of it.
    let mut message = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        message.push_str(": ");
        message.push_str(&s.to_string());
        src = s.source();
    }
    if e.is_connect() && e.is_timeout() {
        StoreError::Timeout {
            endpoint: endpoint.to_owned(),
            deadline: Deadline::Connect,
            after: connect_timeout,
        }
    } else if e.is_connect() {
        StoreError::Connect {
            endpoint: endpoint.to_owned(),
            message,
        }
    } else {
        StoreError::Transport {
            endpoint: endpoint.to_owned(),
            message,
        }
    }
}

/// Full jitter: a random wait up to `base * 2^(attempt-1)`, capped at `max`.
pub(super) fn backoff(p: &RetryPolicy, attempt: u32) -> Duration {
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
) -> Result<Bytes, StoreError> {
    let mut s = body_stream(resp, stall, endpoint.to_owned());
    let mut buf = bytes::BytesMut::new();
    while let Some(c) = s.next().await {
        buf.extend_from_slice(&c?);
        if buf.len() > 64 << 20 {
            return Err(StoreError::Protocol {
                endpoint: endpoint.to_owned(),
                message: "response body over 64 MiB".into(),
            });
        }
    }
    Ok(buf.freeze())
}

/// The response body as a stream that fails if no bytes come for `stall`.
pub(super) fn body_stream(
    resp: reqwest::Response,
    stall: Duration,
    endpoint: String,
) -> ByteStream {
    let cut_off = endpoint.clone();
    let raw = resp.bytes_stream().map(move |r| {
        r.map_err(|e| StoreError::Transport {
            endpoint: cut_off.clone(),
            message: format!("body cut off: {e}"),
        })
    });
    stall_guard(Box::pin(raw), stall, endpoint)
}

#[cfg(test)]
mod tests {
    use super::*;

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
