//! Previous-owner fill of metadata: a listing page or a HEAD this node owns
//! (routed as [`shoal::route::list_page_key`], or as the object's block 0) and
//! has no fresh answer for is first asked of its runner-up, as a block is
//! ([`super::peer`]), with `Cache-Control: only-if-cached` and the asker's
//! `x-shoal-metadata-ttl`. The runner-up answers from its metadata cache or 504
//! and never asks the origin. Its `Age` comes along: the copy is kept as old as
//! it was there, so a listing's TTL runs from when the origin answered it, not
//! from when it moved.
//!
//! These asks need the answer as it came (a listing's bytes, a HEAD's `Age`),
//! which the cluster reader's stores parse away: they go through clients of
//! their own, one per node.

use std::time::Duration;

use bytes::Bytes;
use futures_util::TryStreamExt;
use http::Method;

use shoal::node_proto::{HOP_HEADER, METADATA_TTL_HEADER};
use shoal::store::s3::Forwarded;
use shoal::store::{is_stored_header, unquote_etag, ObjectMeta, StoreError};

use super::ask::{CACHE_CONTROL, ONLY_IF_CACHED};
use super::own_headers::OWN_HEADERS;
use super::peer::Peers;
use crate::access::trace::PeerFill;
use crate::metadata_cache::Answer;
use crate::metrics::Metrics;

/// The most of a listing page taken from a peer (S3 pages are a few hundred KiB).
const PAGE_LIMIT: usize = 16 << 20;

/// The seconds of an `Age` header.
fn age_of(h: &http::HeaderMap) -> Option<Duration> {
    let v = h.get(http::header::AGE)?.to_str().ok()?;
    v.trim().parse().ok().map(Duration::from_secs)
}

/// What an answer to an only-if-cached ask says: `Ok` with its age when it is
/// a cached answer young enough for `accept`.
fn judged(
    got: Result<Result<Forwarded, StoreError>, tokio::time::error::Elapsed>,
    accept: Duration,
    peer: &str,
) -> Result<(Forwarded, Duration), PeerFill> {
    let got = match got {
        Err(_) => return Err(PeerFill::Timeout),
        Ok(Err(e)) => {
            tracing::debug!(peer, "runner-up metadata ask failed: {e}");
            return Err(PeerFill::Error);
        }
        Ok(Ok(got)) => got,
    };
    match got.status {
        200 => match age_of(&got.headers) {
            Some(age) if age < accept => Ok((got, age)),
            // Held, but older than this asker takes.
            Some(_) => Err(PeerFill::Miss),
            None => {
                tracing::debug!(peer, "runner-up answered an only-if-cached ask without Age");
                Err(PeerFill::Error)
            }
        },
        // Not held (504 to only-if-cached; a HEAD's 404 is a missing mark,
        // whose age no header carries: the origin is asked).
        504 | 404 => Err(PeerFill::Miss),
        s => {
            tracing::debug!(peer, "runner-up answered {s} to an only-if-cached ask");
            Err(PeerFill::Error)
        }
    }
}

impl Peers {
    /// The headers of an ask of the runner-up for metadata no older than `accept`.
    fn ask_headers(accept: Duration) -> Vec<(&'static str, String)> {
        vec![
            (CACHE_CONTROL, ONLY_IF_CACHED.to_owned()),
            (
                METADATA_TTL_HEADER,
                format!(
                    "{:.3}",
                    accept
                        .min(shoal::node_proto::MAX_METADATA_TTL)
                        .as_secs_f64()
                ),
            ),
            // A node never forwards a request that passed through another.
            (HOP_HEADER, "1".to_owned()),
        ]
    }

    /// The listing page routed as `route_key` in `bucket` (`query` and the
    /// client's `passed` headers as this node was asked them) from its
    /// runner-up, if this node owns it and the runner-up holds it younger than
    /// `accept`: the origin's answer and its age. Counted either way.
    pub async fn listing(
        &self,
        bucket: &str,
        route_key: &str,
        query: &[(String, String)],
        passed: &[(&'static str, String)],
        accept: Duration,
        metrics: &Metrics,
    ) -> Option<(Answer, Duration)> {
        // Nothing held is young enough for an asker who takes none.
        if self.timeout.is_zero() || accept.is_zero() {
            return None;
        }
        let peer = self.reader.runner_up(bucket, route_key, 0, &self.self_id)?;
        let mut headers = passed.to_vec();
        headers.extend(Self::ask_headers(accept));
        let client = self.clients.get(&peer);
        let ask = client.forward(Method::GET, bucket, "", query.to_vec(), headers);
        let got = tokio::time::timeout(self.timeout, ask).await;
        let result = match judged(got, accept, &peer) {
            Ok((got, age)) => match whole(got).await {
                Ok(answer) => Ok((answer, age)),
                Err(e) => {
                    tracing::debug!(peer, bucket, "runner-up's listing body failed: {e}");
                    Err(PeerFill::Error)
                }
            },
            Err(r) => Err(r),
        };
        metrics.peer_metadata_fill("list", outcome(&result));
        result.ok()
    }

    /// The HEAD of `bucket/key` (pinned to `if_match`) from the runner-up of
    /// the object's block 0, if this node owns it and the runner-up knows the
    /// version younger than `accept`: the version and how long ago it was
    /// confirmed. Counted either way.
    pub async fn head(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<&str>,
        accept: Duration,
        metrics: &Metrics,
    ) -> Option<(ObjectMeta, Duration)> {
        if self.timeout.is_zero() || accept.is_zero() {
            return None;
        }
        let peer = self.reader.runner_up(bucket, key, 0, &self.self_id)?;
        self.head_of(&peer, (bucket, key), if_match, accept, metrics)
            .await
    }

    /// The version `etag` of `bucket/key` from the node that answers the
    /// object's HEAD, other than this one (the owner of its block 0, or its
    /// runner-up when that is this node), if it knows it: a node asked for a
    /// block of an object it has not seen learns the version from there in
    /// a round trip between nodes, not at the origin's first byte. Any age
    /// will do: a version never changes. Counted as a HEAD's fill.
    pub async fn version(
        &self,
        bucket: &str,
        key: &str,
        etag: &str,
        metrics: &Metrics,
    ) -> Option<(ObjectMeta, Duration)> {
        if self.timeout.is_zero() {
            return None;
        }
        let ranked = self.reader.ranked(bucket, key, 0, 2);
        let peer = ranked.into_iter().find(|n| *n != self.self_id)?;
        let any_age = shoal::node_proto::MAX_METADATA_TTL;
        self.head_of(&peer, (bucket, key), Some(etag), any_age, metrics)
            .await
    }

    /// [`Self::head`] of node `peer`.
    async fn head_of(
        &self,
        peer: &str,
        (bucket, key): (&str, &str),
        if_match: Option<&str>,
        accept: Duration,
        metrics: &Metrics,
    ) -> Option<(ObjectMeta, Duration)> {
        let mut headers = Self::ask_headers(accept);
        if let Some(e) = if_match {
            headers.push(("if-match", format!("\"{e}\"")));
        }
        let client = self.clients.get(peer);
        let ask = client.forward(Method::HEAD, bucket, key, Vec::new(), headers);
        let got = tokio::time::timeout(self.timeout, ask).await;
        let result = judged(got, accept, peer).and_then(|(got, age)| match meta_of(&got.headers) {
            Some(meta) if if_match.is_none_or(|e| e == meta.etag) => Ok((meta, age)),
            _ => {
                tracing::warn!(
                    peer,
                    bucket,
                    key,
                    "runner-up's HEAD is not a whole object's"
                );
                Err(PeerFill::Error)
            }
        });
        metrics.peer_metadata_fill("head", outcome(&result));
        result.ok()
    }
}

fn outcome<T>(r: &Result<T, PeerFill>) -> PeerFill {
    match r {
        Ok(_) => PeerFill::Hit,
        Err(r) => *r,
    }
}

/// A listing answer read whole, as the origin gave it to the runner-up.
async fn whole(mut got: Forwarded) -> Result<Answer, StoreError> {
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = got.body.try_next().await? {
        if body.len() + chunk.len() > PAGE_LIMIT {
            return Err(StoreError::Protocol {
                endpoint: "runner-up".into(),
                message: format!("a listing answer over {PAGE_LIMIT} bytes"),
            });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Answer {
        status: got.status,
        headers: got
            .headers
            .iter()
            // Its age is the runner-up's to report; the rest of what is the
            // runner-up's own (not the origin's) a proxy never copies.
            .filter(|(n, _)| n.as_str() != "age" && !OWN_HEADERS.contains(&n.as_str()))
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect(),
        body: Bytes::from(body),
    })
}

/// The version a node's HEAD of a whole object describes.
fn meta_of(h: &http::HeaderMap) -> Option<ObjectMeta> {
    let get = |n: http::HeaderName| h.get(n).and_then(|v| v.to_str().ok());
    if h.contains_key(http::header::CONTENT_RANGE) {
        return None;
    }
    Some(ObjectMeta {
        size: get(http::header::CONTENT_LENGTH)?.parse().ok()?,
        etag: unquote_etag(get(http::header::ETAG)?).to_owned(),
        last_modified: get(http::header::LAST_MODIFIED)
            .and_then(|v| httpdate::parse_http_date(v).ok()),
        content_type: get(http::header::CONTENT_TYPE).map(str::to_owned),
        headers: h
            .iter()
            .filter(|(n, _)| is_stored_header(n.as_str()))
            .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heads_headers_make_the_version_and_a_partial_one_does_not() {
        let mut h = http::HeaderMap::new();
        h.insert("content-length", "42".parse().unwrap());
        h.insert("etag", "\"abc\"".parse().unwrap());
        h.insert("content-type", "text/plain".parse().unwrap());
        h.insert("x-amz-meta-color", "blue".parse().unwrap());
        h.insert("age", "7".parse().unwrap());
        let m = meta_of(&h).unwrap();
        assert_eq!((m.size, m.etag.as_str()), (42, "abc"));
        assert_eq!(m.content_type.as_deref(), Some("text/plain"));
        assert_eq!(m.headers, vec![("x-amz-meta-color".into(), "blue".into())]);
        assert_eq!(age_of(&h), Some(Duration::from_secs(7)));
        h.insert("content-range", "bytes 0-9/42".parse().unwrap());
        assert!(meta_of(&h).is_none());
    }
}
