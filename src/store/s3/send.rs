//! Sending one request: within the connect, first-byte and stall deadlines,
//! on the pool or a socket of its own, retried when idempotent (an expired
//! token refreshed, a bucket in another region followed, once each), its
//! error answer mapped; and reading what comes back.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderMap, Method, StatusCode};

use super::call::Call;
use super::errors::{may_be_ours, transport_error};
use super::RetryPolicy;
use super::S3Client;
use crate::store::{budget, stall_guard, ByteStream, StoreError};
use aws_credential_types::Credentials as AwsCredentials;

impl S3Client {
    /// Sends `call` and reads its (small, XML) answer.
    pub(super) async fn small(&self, call: Call<'_>) -> Result<Bytes, StoreError> {
        self.small_with_headers(call).await.map(|(_, b)| b)
    }

    /// [`Self::small`], with the answer's headers.
    pub(super) async fn small_with_headers(
        &self,
        call: Call<'_>,
    ) -> Result<(HeaderMap, Bytes), StoreError> {
        let resp = self.execute(call).await?;
        let headers = resp.headers().clone();
        let body = read_small_body(resp, self.inner.opts.timeouts.stall, &self.inner.label).await?;
        Ok((headers, body))
    }

    /// The credentials to sign the next request with; `None` when anonymous.
    pub(super) async fn credentials(&self) -> Result<Option<AwsCredentials>, StoreError> {
        match &self.inner.creds {
            None => Ok(None),
            Some(src) => src
                .current()
                .await
                .map(Some)
                .map_err(|e| StoreError::Credentials {
                    message: e.to_string(),
                }),
        }
    }

    /// Sends `call`, retrying idempotent requests, and maps error statuses. An
    /// expired token is refreshed and the request sent again once; a bucket found
    /// in another region is followed once (AWS endpoints) or named in the error.
    pub(super) async fn execute(&self, call: Call<'_>) -> Result<reqwest::Response, StoreError> {
        match self.execute_via(&call, Via::Pooled).await? {
            Sent::Pooled(r) => Ok(r),
            Sent::Socket(_) => unreachable!("sent on the pool"),
        }
    }

    /// A GET by [`Self::execute`]'s rules, on the socket transport: its answer's
    /// body is still on the connection.
    pub(super) async fn execute_socket(
        &self,
        call: Call<'_>,
    ) -> Result<super::socket::Answer, StoreError> {
        match self.execute_via(&call, Via::Socket).await? {
            Sent::Socket(a) => Ok(a),
            Sent::Pooled(_) => unreachable!("sent on a socket"),
        }
    }

    async fn execute_via(&self, call: &Call<'_>, via: Via) -> Result<Sent, StoreError> {
        let policy = self.inner.opts.retry;
        let max = if call.retry {
            policy.max_attempts.max(1)
        } else {
            1
        };
        let throttle_deadline = self
            .inner
            .opts
            .throttling
            .filter(|_| call.retry)
            .map(|t| t.deadline);
        let first_sent = std::time::Instant::now();
        let (mut attempt, mut throttles) = (0, 0);
        let (mut refreshed, mut moved) = (false, false);
        loop {
            attempt += 1;
            let permit = match &self.inner.budget {
                Some(b) => Some(b.acquire(budget::current(), call.charge.unwrap_or(0)).await),
                None => None,
            };
            let creds = self.credentials().await?;
            let sent = match via {
                Via::Pooled => self.attempt(call, creds.as_ref()).await.map(Sent::Pooled),
                Via::Socket => self
                    .attempt_socket(call, creds.as_ref())
                    .await
                    .map(Sent::Socket),
            };
            if let Some(p) = &permit {
                match &sent {
                    Err(e) if e.is_throttled() => p.budget().throttled(),
                    Err(_) => {}
                    Ok(_) => p.budget().succeeded(),
                }
            }
            let sent = match (sent, permit) {
                // A HEAD's Content-Length is the object's, not bytes sent.
                (Ok(s), Some(p)) => Ok(s.holding(
                    p,
                    call.charge.is_none() && call.method != http::Method::HEAD,
                )),
                (sent, _) => sent,
            };
            match sent {
                Ok(r) => return Ok(r),
                Err(StoreError::ExpiredToken { .. }) if !refreshed && creds.is_some() => {
                    refreshed = true;
                    attempt -= 1;
                    let src = self.inner.creds.as_ref().expect("signed, so a source");
                    let stale = creds.as_ref().expect("checked above");
                    src.refresh_after(stale)
                        .await
                        .map_err(|e| StoreError::Credentials {
                            message: e.to_string(),
                        })?;
                }
                Err(StoreError::WrongRegion { bucket, region, .. })
                    if !moved && self.inner.opts.aws.is_some() =>
                {
                    moved = true;
                    attempt -= 1;
                    tracing::info!(
                        bucket,
                        region,
                        "the bucket is in another region: following it"
                    );
                    self.inner.regions.lock().unwrap().insert(bucket, region);
                }
                // A throttled request waits and tries again until its deadline,
                // however many tries that takes: the origin still answers some,
                // and the budget has shrunk to what it answers.
                Err(e) if e.is_throttled() && throttle_deadline.is_some() => {
                    throttles += 1;
                    attempt -= 1;
                    let delay = backoff(&policy, throttles);
                    let deadline = throttle_deadline.expect("checked above");
                    if first_sent.elapsed() + delay > deadline {
                        return Err(StoreError::Exhausted {
                            attempts: attempt + throttles,
                            last: Box::new(e),
                        });
                    }
                    tracing::debug!(endpoint = %self.inner.label, throttles, ?delay, "throttled, trying again: {e}");
                    tokio::time::sleep(delay).await;
                }
                Err(e) if e.is_retryable() && attempt < max => {
                    let delay = backoff(&policy, attempt);
                    tracing::debug!(endpoint = %self.inner.label, attempt, ?delay, "retrying after: {e}");
                    tokio::time::sleep(delay).await;
                }
                Err(e) if attempt + throttles > 1 => {
                    return Err(StoreError::Exhausted {
                        attempts: attempt + throttles,
                        last: Box::new(e),
                    })
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn attempt(
        &self,
        call: &Call<'_>,
        creds: Option<&AwsCredentials>,
    ) -> Result<reqwest::Response, StoreError> {
        let inner = &*self.inner;
        let (url, host) = self.url(call.bucket, call.key, &call.query);
        let headers = self.headers(call, &url, &host, creds)?;
        let streamed = call.stream.lock().expect("not poisoned").take();
        let req = inner
            .http
            .request(call.method.clone(), &url)
            .headers(headers)
            .body(streamed.unwrap_or_else(|| call.body.clone().into()));
        let first_byte = call.first_byte.unwrap_or(inner.opts.timeouts.first_byte);
        let resp = match tokio::time::timeout(first_byte, req.send()).await {
            Err(_) => return Err(self.first_byte_timeout(first_byte)),
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
        if status.is_success() || (call.raw && !may_be_ours(status)) {
            return Ok(resp);
        }
        let resp_headers = resp.headers().clone();
        let body = if status == StatusCode::NOT_MODIFIED || call.method == Method::HEAD {
            Bytes::new()
        } else {
            read_small_body(resp, inner.opts.timeouts.stall, &inner.label)
                .await
                .unwrap_or_default()
        };
        let e = self.error_answer(&call.context(), status, &resp_headers, &body);
        if call.raw
            && !matches!(
                e,
                StoreError::ExpiredToken { .. } | StoreError::WrongRegion { .. }
            )
        {
            // Not about our credentials or region: the asker gets it as it came.
            let mut back = http::Response::new(reqwest::Body::from(body));
            *back.status_mut() = status;
            *back.headers_mut() = resp_headers;
            return Ok(reqwest::Response::from(back));
        }
        Err(self.with_hint(e, &call.context()))
    }

    /// [`Self::attempt`] for a GET on the socket transport.
    async fn attempt_socket(
        &self,
        call: &Call<'_>,
        creds: Option<&AwsCredentials>,
    ) -> Result<super::socket::Answer, StoreError> {
        let inner = &*self.inner;
        let sockets = inner.sockets.as_ref().expect("a socket transport");
        let (url, host) = self.url(call.bucket, call.key, &call.query);
        let headers = self.headers(call, &url, &host, creds)?;
        // Where the request goes is the URL's host (a bucket's own name when
        // virtual-hosted), with the scheme's port where the endpoint names none.
        let ep = &inner.opts.endpoint;
        let authority = match ep.port() {
            Some(_) => host.clone(),
            None => format!("{host}:{}", ep.port_or_known_default().unwrap_or(80)),
        };
        // What follows the authority in the URL: the encoded path and query.
        let path = url
            .split_once("://")
            .and_then(|(_, rest)| rest.find('/').map(|i| &rest[i..]))
            .unwrap_or("/");
        let first_byte = call.first_byte.unwrap_or(inner.opts.timeouts.first_byte);
        let answer =
            tokio::time::timeout(first_byte, sockets.get(&authority, &host, path, &headers))
                .await
                .map_err(|_| self.first_byte_timeout(first_byte))??;
        let status = StatusCode::from_u16(answer.status)
            .map_err(|_| self.protocol(format!("status {}", answer.status)))?;
        if status.is_success() {
            return Ok(answer);
        }
        let body = if status == StatusCode::NOT_MODIFIED {
            Vec::new()
        } else {
            answer.body.small().await
        };
        let e = self.error_answer(&call.context(), status, &answer.headers, &body);
        Err(self.with_hint(e, &call.context()))
    }
}

/// Which transport a request goes on.
#[derive(Clone, Copy)]
enum Via {
    Pooled,
    Socket,
}

/// An answer, from either transport.
enum Sent {
    Pooled(reqwest::Response),
    Socket(super::socket::Answer),
}

impl Sent {
    /// The answer keeps the request's place in the budget until its body is
    /// dropped; one whose length was not charged is charged now.
    fn holding(mut self, permit: budget::Permit, uncharged: bool) -> Sent {
        let headers = match &self {
            Sent::Pooled(r) => r.headers(),
            Sent::Socket(a) => &a.headers,
        };
        if uncharged {
            let len = headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            permit.charge(len);
        }
        match &mut self {
            Sent::Pooled(r) => drop(r.extensions_mut().insert(permit)),
            Sent::Socket(a) => a.body.hold(permit),
        }
        self
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
    // The request's place in the origin's budget goes with its body.
    let permit = resp.extensions().get::<budget::Permit>().cloned();
    let raw = resp.bytes_stream().map(move |r| {
        let _held = &permit;
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
