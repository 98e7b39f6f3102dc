//! GET and HEAD of objects: which version and which bytes a request asks for, then
//! the node's read path.

use futures_util::TryStreamExt;
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};
use shoal::store::{unquote_etag, ObjectMeta};

use super::error::{cached_only, check_key, node_error, not_cached};
use super::NodeApi;
use crate::access::trace::{self, Outcome};
use crate::node::Via;

/// RFC 9211's header: what each cache on the way did.
pub const CACHE_STATUS: &str = "cache-status";

/// The hop count a request carries (`x-shoal-hop`), counted when present, and
/// how old metadata it accepts.
pub fn via(api: &NodeApi, headers: &http::HeaderMap) -> S3Result<Via> {
    let accept = api.node.metadata.accept(asked_ttl(headers)?);
    let cached_only = cached_only(headers);
    let acknowledge = crate::node::only_if_cached(headers);
    let class = asked_class(headers)?;
    let max_age = asked_max_age(headers)?;
    let Some(v) = headers.get(shoal::node_proto::HOP_HEADER) else {
        return Ok(Via {
            hop: 0,
            accept,
            cached_only,
            acknowledge,
            class,
            max_age,
        });
    };
    let hop = v
        .to_str()
        .ok()
        .and_then(shoal::node_proto::parse_hop)
        .ok_or_else(|| s3_error!(InvalidArgument, "x-shoal-hop must be a small number"))?;
    api.node.metrics.hop_requests.inc();
    Ok(Via {
        hop,
        accept,
        cached_only,
        acknowledge,
        class,
        max_age,
    })
}

/// The oldest metadata the request takes (`Cache-Control: max-age=N`, or
/// `no-cache`: none cached), if it says; RFC 9111's other directives are not
/// this node's to act on here.
pub fn asked_max_age(headers: &http::HeaderMap) -> S3Result<Option<std::time::Duration>> {
    let mut bound: Option<std::time::Duration> = None;
    for v in headers.get_all(http::header::CACHE_CONTROL) {
        let v = v
            .to_str()
            .map_err(|_| s3_error!(InvalidArgument, "Cache-Control must be ASCII"))?;
        for d in v.split(',').map(str::trim) {
            let secs = if d.eq_ignore_ascii_case("no-cache") {
                0
            } else if let Some((name, value)) = d.split_once('=') {
                if !name.trim().eq_ignore_ascii_case("max-age") {
                    continue;
                }
                shoal::node_proto::parse_max_age(value).ok_or_else(|| {
                    s3_error!(
                        InvalidArgument,
                        "Cache-Control max-age must be whole seconds (RFC 9111)"
                    )
                })?
            } else {
                continue;
            };
            let d = std::time::Duration::from_secs(secs);
            bound = Some(bound.map_or(d, |b| b.min(d)));
        }
    }
    Ok(bound)
}

/// What the request is for (`x-shoal-class`): a read someone waits on unless it
/// says otherwise.
fn asked_class(headers: &http::HeaderMap) -> S3Result<shoal::store::budget::Class> {
    let Some(v) = headers.get(shoal::node_proto::CLASS_HEADER) else {
        return Ok(Default::default());
    };
    v.to_str()
        .ok()
        .and_then(shoal::store::budget::Class::parse)
        .ok_or_else(|| {
            s3_error!(
                InvalidArgument,
                "x-shoal-class must be read, read-ahead or background"
            )
        })
}

/// How old an answer the request accepts (`x-shoal-metadata-ttl`), if it says.
pub fn asked_ttl(headers: &http::HeaderMap) -> S3Result<Option<std::time::Duration>> {
    let Some(v) = headers.get(shoal::node_proto::METADATA_TTL_HEADER) else {
        return Ok(None);
    };
    v.to_str()
        .ok()
        .and_then(shoal::node_proto::parse_metadata_ttl)
        .map(Some)
        .ok_or_else(|| {
            s3_error!(
                InvalidArgument,
                "x-shoal-metadata-ttl must be seconds from 0 to 86400"
            )
        })
}

pub fn condition_etag(c: &ETagCondition) -> Option<String> {
    match c {
        ETagCondition::Any => None,
        ETagCondition::ETag(t) => Some(unquote_etag(t.value()).to_owned()),
    }
}

/// The bytes `range` asks of an object of `size` bytes, and its `Content-Range`.
/// A range that selects nothing (any range of an empty object) is unsatisfiable.
pub fn byte_span(range: &Range, size: u64) -> S3Result<(u64, u64, String)> {
    match range.check(size) {
        Ok(span) if span.start < span.end => {
            let cr = format!("bytes {}-{}/{size}", span.start, span.end - 1);
            Ok((span.start, span.end, cr))
        }
        _ => Err(s3_error!(
            InvalidRange,
            "The requested range is not satisfiable"
        )),
    }
}

/// What a GET or HEAD asks for beyond the key.
struct Ask<'a> {
    if_match: Option<&'a ETagCondition>,
    if_none_match: Option<&'a ETagCondition>,
    if_modified_since: Option<&'a Timestamp>,
    if_unmodified_since: Option<&'a Timestamp>,
    range: Option<Range>,
}

macro_rules! ask {
    ($i:expr) => {
        Ask {
            if_match: $i.if_match.as_ref(),
            if_none_match: $i.if_none_match.as_ref(),
            if_modified_since: $i.if_modified_since.as_ref(),
            if_unmodified_since: $i.if_unmodified_since.as_ref(),
            range: $i.range,
        }
    };
}

pub(super) fn time(t: &Timestamp) -> std::time::SystemTime {
    std::time::SystemTime::from(time::OffsetDateTime::from(t.clone()))
}

struct Resolved {
    meta: ObjectMeta,
    start: u64,
    end: u64,
    content_range: Option<String>,
}

impl NodeApi {
    async fn resolve(
        &self,
        bucket: &str,
        key: &str,
        ask: Ask<'_>,
        get: bool,
        via: Via,
    ) -> S3Result<Resolved> {
        let Ask {
            if_match,
            if_none_match,
            if_modified_since,
            if_unmodified_since,
            range,
        } = ask;
        check_key(key)?;
        let pinned = if_match.and_then(condition_etag);
        let bs = self.node.policy(bucket, key).block_size;
        // Where the read starts, when that is known without the object's size.
        let start_block = match range {
            None => Some(0),
            Some(Range::Int { first, .. }) => Some(first / bs),
            Some(Range::Suffix { .. }) => None,
        };
        let meta = match (&pinned, start_block) {
            (Some(etag), Some(index)) if get => {
                self.node
                    .resolve_pinned(bucket, key, etag, index, via)
                    .await
            }
            _ => {
                self.node
                    .resolve_for(bucket, key, pinned.as_deref(), via, get)
                    .await
            }
        }
        .map_err(node_error)?;
        // RFC 7232's order, as S3 keeps it: If-Match (resolved above) else
        // If-Unmodified-Since may fail the request; then If-None-Match else
        // If-Modified-Since may make it a 304.
        let modified = |t: &Timestamp| meta.last_modified.is_none_or(|m| m > time(t));
        if if_match.is_none() && if_unmodified_since.is_some_and(modified) {
            return Err(s3_error!(
                PreconditionFailed,
                "At least one of the pre-conditions you specified did not hold"
            ));
        }
        let unmodified = match (if_none_match, if_modified_since) {
            (Some(c), _) => condition_etag(c).is_none_or(|e| e == meta.etag),
            (None, Some(t)) => !modified(t),
            (None, None) => false,
        };
        if unmodified {
            let mut status = http::HeaderMap::new();
            cache_status(self, &mut status, outcome_of_head());
            return Err(not_modified(&meta, status));
        }
        let (start, end, content_range) = match range {
            None => (0, meta.size, None),
            Some(r) => {
                let (start, end, cr) = byte_span(&r, meta.size)?;
                (start, end, Some(cr))
            }
        };
        Ok(Resolved {
            meta,
            start,
            end,
            content_range,
        })
    }
}

/// A 304 carries the validators and the caching headers a 200 would have
/// carried (RFC 9110 15.4.5), as S3 sends them: clients read the ETag of a 304.
fn not_modified(meta: &ObjectMeta, mut h: http::HeaderMap) -> s3s::S3Error {
    let mut e = s3_error!(NotModified);
    if let Ok(v) = http::HeaderValue::from_str(&format!("\"{}\"", meta.etag)) {
        h.insert(http::header::ETAG, v);
    }
    if let Some(t) = meta.last_modified {
        if let Ok(v) = http::HeaderValue::from_str(&httpdate::fmt_http_date(t)) {
            h.insert(http::header::LAST_MODIFIED, v);
        }
    }
    for (name, value) in &meta.headers {
        if matches!(
            name.as_str(),
            "cache-control" | "expires" | "content-location" | "vary"
        ) {
            if let (Ok(n), Ok(v)) = (
                http::HeaderName::from_bytes(name.as_bytes()),
                http::HeaderValue::from_str(value),
            ) {
                h.append(n, v);
            }
        }
    }
    e.set_headers(h);
    e
}

/// The headers the object was stored with, on an answer, with a GET's
/// `response-*` overrides in their place.
fn stored_headers(
    meta: &ObjectMeta,
    overrides: &[(&'static str, Option<&str>)],
) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    for (name, value) in &meta.headers {
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(name.as_bytes()),
            http::HeaderValue::from_str(value),
        ) {
            h.append(n, v);
        }
    }
    for (name, value) in overrides {
        if let Some(v) = value.and_then(|v| http::HeaderValue::from_str(v).ok()) {
            h.insert(*name, v);
        }
    }
    h
}

pub async fn get(
    api: &NodeApi,
    req: S3Request<GetObjectInput>,
) -> S3Result<S3Response<GetObjectOutput>> {
    let mut via = via(api, &req.headers)?;
    let refuse = not_cached(&req.headers);
    let i = req.input;
    check_key(&i.key)?;
    let node = &api.node;
    // The owner of a block asked for it by a node it spilled to answers as its
    // own reader's miss: turned away, that node and every other one the block
    // spilled to would each fetch it from the origin.
    if let (true, Some(Range::Int { first, .. })) = (via.cached_only, i.range) {
        if node.fills_as_owner(&req.headers, &i.bucket, &i.key, first) {
            node.metrics.owner_fill_asks.inc();
            via.cached_only = false;
        }
    }
    let cached_only = via.cached_only;
    if cached_only {
        // Not even the version is known here: nothing can be cached.
        let known = i
            .if_match
            .as_ref()
            .and_then(condition_etag)
            .and_then(|e| node.known(&i.bucket, &i.key, &e));
        if known.is_none() {
            return Err(refuse);
        }
    }
    let r = api.resolve(&i.bucket, &i.key, ask!(i), true, via).await?;
    if cached_only
        && !node
            .held_or_arriving(&i.bucket, &i.key, &r.meta, (r.start, r.end), via)
            .await
    {
        return Err(refuse);
    }
    let held = cached_only
        || node
            .cached(&i.bucket, &i.key, &r.meta, r.start, r.end)
            .await;
    let body = node
        .read(&i.bucket, &i.key, &r.meta, r.start, r.end, via)
        .await
        .map_err(node_error)?;
    // Anything asked past this node (the version, the first block) is a miss.
    let outcome = if trace::was_revalidated() {
        Outcome::Stale
    } else if held && !trace::went_out() {
        Outcome::Hit
    } else {
        Outcome::Miss
    };
    let expires = i
        .response_expires
        .as_ref()
        .map(|t| httpdate::fmt_http_date(time(t)));
    let headers = stored_headers(
        &r.meta,
        &[
            ("cache-control", i.response_cache_control.as_deref()),
            (
                "content-disposition",
                i.response_content_disposition.as_deref(),
            ),
            ("content-encoding", i.response_content_encoding.as_deref()),
            ("content-language", i.response_content_language.as_deref()),
            ("expires", expires.as_deref()),
        ],
    );
    let mut resp = S3Response::new(GetObjectOutput {
        body: Some(StreamingBlob::wrap(body.map_err(std::io::Error::other))),
        content_length: Some((r.end - r.start) as i64),
        content_range: r.content_range,
        e_tag: Some(ETag::Strong(r.meta.etag.clone())),
        last_modified: r.meta.last_modified.map(Timestamp::from),
        accept_ranges: Some("bytes".into()),
        content_type: i
            .response_content_type
            .or_else(|| r.meta.content_type.clone()),
        ..Default::default()
    });
    resp.headers = headers;
    cache_status(api, &mut resp.headers, outcome);
    Ok(resp)
}

/// What the cache did for an answer about the version alone (a HEAD, a 304).
fn outcome_of_head() -> Outcome {
    if trace::was_revalidated() {
        Outcome::Stale
    } else if trace::went_out() {
        Outcome::Miss
    } else {
        Outcome::Hit
    }
}

/// This node's `Cache-Status` entry (RFC 9211), then, on a gateway, the entry of
/// the owner it forwarded to; counted by outcome as the header says it.
fn cache_status(api: &NodeApi, h: &mut http::HeaderMap, outcome: Outcome) {
    api.node.metrics.cache_outcome(outcome);
    let mut v = outcome.entry(true);
    // The owner's answer to the first block it was asked for speaks for it.
    if let Some(owner) = trace::current().and_then(|t| t.upstream.lock().unwrap().first().cloned())
    {
        v.push_str(", ");
        v.push_str(&owner);
    }
    if let Ok(v) = http::HeaderValue::from_str(&v) {
        h.insert(CACHE_STATUS, v);
    }
}

pub async fn head(
    api: &NodeApi,
    req: S3Request<HeadObjectInput>,
) -> S3Result<S3Response<HeadObjectOutput>> {
    let via = via(api, &req.headers)?;
    let cached_only = via.cached_only;
    let refuse = not_cached(&req.headers);
    let i = req.input;
    check_key(&i.key)?;
    let node = &api.node;
    // A key the origin said is missing, to an asker that accepts it.
    if let Some(accept) = via.accept {
        if node
            .metadata
            .missing(&i.bucket, &i.key, via.bounded(accept))
        {
            node.metrics.metadata_request("head", "hit");
            return Err(s3_error!(NoSuchKey, "The specified key does not exist."));
        }
    }
    // A cached-only ask (a runner-up's) is told how long ago the origin
    // confirmed the version, which the asker keeps.
    // A version named by `If-Match` is good at any age: versions never change.
    let held_age = match cached_only {
        true => {
            let named = (i.if_match.as_ref().and_then(condition_etag))
                .and_then(|e| node.known_version_aged(&i.bucket, &i.key, &e));
            let held = named.or_else(|| node.known_aged(&i.bucket, &i.key, via));
            Some(held.ok_or(refuse)?.1)
        }
        false => None,
    };
    let r = match api.resolve(&i.bucket, &i.key, ask!(i), false, via).await {
        Err(e) if via.accept.is_some() && *e.code() == s3s::S3ErrorCode::NoSuchKey => {
            node.metadata.note_missing(&i.bucket, &i.key);
            return Err(e);
        }
        r => r?,
    };
    if via.accept.is_some() {
        node.metadata.note_found(&i.bucket, &i.key);
    }
    let mut resp = S3Response::new(HeadObjectOutput {
        content_length: Some((r.end - r.start) as i64),
        content_range: r.content_range,
        e_tag: Some(ETag::Strong(r.meta.etag.clone())),
        last_modified: r.meta.last_modified.map(Timestamp::from),
        accept_ranges: Some("bytes".into()),
        content_type: r.meta.content_type.clone(),
        ..Default::default()
    });
    resp.headers = stored_headers(&r.meta, &[]);
    if let Some(age) = held_age {
        let secs = crate::metadata_cache::age_secs_up(age);
        resp.headers
            .insert(http::header::AGE, http::HeaderValue::from(secs));
    }
    cache_status(api, &mut resp.headers, outcome_of_head());
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use shoal::store::budget::Class;

    fn class_of(v: Option<&str>) -> Result<Class, String> {
        let mut h = http::HeaderMap::new();
        if let Some(v) = v {
            h.insert(shoal::node_proto::CLASS_HEADER, v.parse().unwrap());
        }
        super::asked_class(&h).map_err(|e| format!("{e:?}"))
    }

    #[test]
    fn a_request_says_its_class_or_is_a_read_and_nonsense_is_refused() {
        assert_eq!(class_of(None), Ok(Class::Read));
        assert_eq!(class_of(Some("read-ahead")), Ok(Class::ReadAhead));
        assert_eq!(class_of(Some("background")), Ok(Class::Background));
        for bad in ["", "urgent", "READ", "read,background"] {
            let e = class_of(Some(bad)).expect_err(bad);
            assert!(e.contains("x-shoal-class must be"), "{bad}: {e}");
        }
    }
}
