//! The S3 operations a node answers, on `s3s` (request parsing, SigV4 checks, XML).
//!
//! Reads of objects are served from the tiers (or passed through uncached when the
//! rules say so); listings and bucket checks are passed to the origin uncached, so
//! ordinary S3 tools work against a node. Writes are refused, unless the node is a
//! gateway with `[gateway] writes = true` ([`crate::writes`]). Errors map to S3 codes
//! in one place: [`s3_error`].

use std::sync::Arc;

use futures_util::TryStreamExt;
use s3s::dto::*;
use s3s::{s3_error, S3ErrorCode, S3Request, S3Response, S3Result, S3};
use shoal::s3::{unquote_etag, ListEntry, ListPage, ListRequest, S3Error};

use crate::fanout::{Fanout, Target};
use crate::node::{Node, Via};

pub struct NodeApi {
    pub node: Arc<Node>,
    /// Where invalidations go on to other nodes (a node with a `[cluster]`).
    pub fanout: Option<Arc<Fanout>>,
    pub writes: Option<crate::writes::Writes>,
}

impl NodeApi {
    /// Drops `target` here and queues it for every other node.
    pub async fn invalidate(&self, bucket: &str, target: Target) {
        invalidate(&self.node, self.fanout.as_deref(), bucket, target, true).await;
    }
}

/// Drops `target` on this node and, if `pass_on`, queues it for the others.
pub async fn invalidate(
    node: &Node,
    fanout: Option<&Fanout>,
    bucket: &str,
    target: Target,
    pass_on: bool,
) -> u64 {
    let n = match &target {
        Target::Key(k) => node.purge_object(bucket, k).await,
        Target::Prefix(p) => node.purge_prefix(bucket, p).await,
        Target::KeyExcept(k, e) => node.purge_other_versions(bucket, k, e).await,
    };
    let kind = if pass_on { "local" } else { "fanout" };
    node.metrics
        .invalidations
        .get_or_create(&crate::metrics::KindLabel { kind })
        .inc();
    if pass_on {
        if let Some(f) = fanout {
            f.send(node, bucket, target);
        }
    }
    n
}

/// The hop count a request carries (`x-shoal-hop`), counted when present.
fn via(node: &Node, headers: &http::HeaderMap) -> S3Result<Via> {
    let Some(v) = headers.get(shoal::s3::HOP_HEADER) else {
        return Ok(Via::default());
    };
    let hop = v
        .to_str()
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .ok_or_else(|| s3_error!(InvalidArgument, "x-shoal-hop must be a small number"))?;
    node.metrics.hop_requests.inc();
    Ok(Via { hop })
}

/// Our error as the S3 error a client gets.
pub fn s3_error(e: S3Error) -> s3s::S3Error {
    let code =
        S3ErrorCode::from_bytes(e.s3_code().as_bytes()).unwrap_or(S3ErrorCode::InternalError);
    let mut err = s3s::S3Error::with_message(code, e.to_string());
    if let Ok(status) = http::StatusCode::from_u16(e.http_status()) {
        err.set_status_code(status);
    }
    if !e.is_answer() {
        tracing::warn!("answering 503: {e}");
    }
    err
}

fn condition_etag(c: &ETagCondition) -> Option<String> {
    match c {
        ETagCondition::Any => None,
        ETagCondition::ETag(t) => Some(unquote_etag(t.value()).to_owned()),
    }
}

fn check_key(key: &str) -> S3Result<()> {
    match shoal::s3::key_problem(key) {
        Some(why) => Err(s3_error!(InvalidArgument, "invalid key: {why}")),
        None => Ok(()),
    }
}

/// The answer to a cached-only request that would need the origin.
fn not_cached() -> s3s::S3Error {
    let mut e = s3s::S3Error::with_message(
        S3ErrorCode::Custom(shoal::s3::NOT_CACHED.into()),
        "not cached here (cached-only request)",
    );
    e.set_status_code(http::StatusCode::SERVICE_UNAVAILABLE);
    e
}

fn read_only() -> s3s::S3Error {
    let mut e = s3s::S3Error::with_message(
        S3ErrorCode::MethodNotAllowed,
        "shoal-node serves reads only; write to the origin",
    );
    e.set_status_code(http::StatusCode::METHOD_NOT_ALLOWED);
    e
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
    range: Option<Range>,
}

struct Resolved {
    meta: shoal::s3::ObjectMeta,
    start: u64,
    end: u64,
    content_range: Option<String>,
}

impl NodeApi {
    /// Listings of buckets and of objects are one kind of origin request.
    fn count_origin_list(&self) {
        self.node
            .metrics
            .origin_requests
            .get_or_create(&crate::metrics::KindLabel { kind: "list" })
            .inc();
    }

    async fn list_origin(&self, req: ListRequest) -> S3Result<ListPage> {
        self.count_origin_list();
        self.node
            .origin()
            .list_objects_v2(&req)
            .await
            .map_err(s3_error)
    }

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
        .map_err(s3_error)?;
        if let Some(c) = if_none_match {
            if condition_etag(c).is_none_or(|e| e == meta.etag) {
                return Err(s3_error!(NotModified));
            }
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

#[async_trait::async_trait]
impl S3 for NodeApi {
    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let cached_only = req.headers.contains_key(shoal::s3::CACHED_ONLY_HEADER);
        let via = via(&self.node, &req.headers)?;
        let i = req.input;
        check_key(&i.key)?;
        if !self.node.policy(&i.bucket, &i.key).cache {
            if cached_only {
                return Err(not_cached());
            }
            return crate::passthrough::get(&self.node, i).await;
        }
        if cached_only {
            // Not even the version is known here: nothing can be cached.
            let known = i
                .if_match
                .as_ref()
                .and_then(condition_etag)
                .and_then(|e| self.node.known(&i.bucket, &i.key, &e));
            if known.is_none() {
                return Err(not_cached());
            }
        }
        let r = self
            .resolve(
                &i.bucket,
                &i.key,
                Ask {
                    if_match: i.if_match.as_ref(),
                    if_none_match: i.if_none_match.as_ref(),
                    range: i.range,
                },
                true,
                via,
            )
            .await?;
        if cached_only
            && !self
                .node
                .cached(&i.bucket, &i.key, &r.meta, r.start, r.end)
                .await
        {
            return Err(not_cached());
        }
        let body = self
            .node
            .read(&i.bucket, &i.key, &r.meta, r.start, r.end, via)
            .await
            .map_err(s3_error)?;
        Ok(S3Response::new(GetObjectOutput {
            body: Some(StreamingBlob::wrap(body.map_err(std::io::Error::other))),
            content_length: Some((r.end - r.start) as i64),
            content_range: r.content_range,
            e_tag: Some(ETag::Strong(r.meta.etag.clone())),
            last_modified: r.meta.last_modified.map(Timestamp::from),
            accept_ranges: Some("bytes".into()),
            content_type: r.meta.content_type.clone(),
            ..Default::default()
        }))
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let via = via(&self.node, &req.headers)?;
        let i = req.input;
        check_key(&i.key)?;
        if !self.node.policy(&i.bucket, &i.key).cache {
            return crate::passthrough::head(&self.node, i).await;
        }
        let r = self
            .resolve(
                &i.bucket,
                &i.key,
                Ask {
                    if_match: i.if_match.as_ref(),
                    if_none_match: i.if_none_match.as_ref(),
                    range: i.range,
                },
                false,
                via,
            )
            .await?;
        Ok(S3Response::new(HeadObjectOutput {
            content_length: Some((r.end - r.start) as i64),
            content_range: r.content_range,
            e_tag: Some(ETag::Strong(r.meta.etag.clone())),
            last_modified: r.meta.last_modified.map(Timestamp::from),
            accept_ranges: Some("bytes".into()),
            content_type: r.meta.content_type.clone(),
            ..Default::default()
        }))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let i = req.input;
        let page = self
            .list_origin(ListRequest {
                bucket: i.bucket.clone(),
                prefix: i.prefix.clone().unwrap_or_default(),
                delimiter: i.delimiter.clone(),
                continuation_token: i.continuation_token.clone(),
                start_after: i.start_after.clone(),
                max_keys: i.max_keys.map(|m| m.clamp(0, 1000) as u32),
            })
            .await?;
        let key_count = (page.objects.len() + page.common_prefixes.len()) as i32;
        let (contents, prefixes) = listed(page.objects, page.common_prefixes);
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(i.bucket),
            prefix: i.prefix,
            delimiter: i.delimiter,
            max_keys: Some(i.max_keys.unwrap_or(1000)),
            key_count: Some(key_count),
            is_truncated: Some(page.next_continuation_token.is_some()),
            continuation_token: i.continuation_token,
            next_continuation_token: page.next_continuation_token,
            start_after: i.start_after,
            contents: (!contents.is_empty()).then_some(contents),
            common_prefixes: (!prefixes.is_empty()).then_some(prefixes),
            ..Default::default()
        }))
    }

    /// Version 1 listing (rclone, s3fs and older SDKs use it by default), answered
    /// from the origin's version 2: a marker is "start after", and a marker that is
    /// a common prefix of this listing skips every key rolled up into it.
    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let i = req.input;
        let prefix = i.prefix.clone().unwrap_or_default();
        let start_after = i.marker.as_deref().map(|m| {
            match (i.delimiter.as_deref(), m.strip_prefix(prefix.as_str())) {
                (Some(d), Some(rest)) if !d.is_empty() => match rest.find(d) {
                    Some(at) => format!("{prefix}{}{}", &rest[..at + d.len()], char::MAX),
                    None => m.to_owned(),
                },
                _ => m.to_owned(),
            }
        });
        let page = self
            .list_origin(ListRequest {
                bucket: i.bucket.clone(),
                prefix: prefix.clone(),
                delimiter: i.delimiter.clone(),
                continuation_token: None,
                start_after,
                max_keys: i.max_keys.map(|m| m.clamp(0, 1000) as u32),
            })
            .await?;
        let truncated = page.next_continuation_token.is_some();
        // The last entry in key order, key or common prefix, is where the next
        // page starts.
        let next_marker = truncated
            .then(|| {
                let last_key = page.objects.last().map(|o| o.key.clone());
                let last_prefix = page.common_prefixes.last().cloned();
                last_key.max(last_prefix)
            })
            .flatten();
        let (contents, prefixes) = listed(page.objects, page.common_prefixes);
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(i.bucket),
            prefix: Some(prefix),
            marker: i.marker,
            next_marker,
            delimiter: i.delimiter,
            max_keys: Some(i.max_keys.unwrap_or(1000)),
            is_truncated: Some(truncated),
            contents: (!contents.is_empty()).then_some(contents),
            common_prefixes: (!prefixes.is_empty()).then_some(prefixes),
            ..Default::default()
        }))
    }

    async fn list_buckets(
        &self,
        _req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        self.count_origin_list();
        let buckets = self
            .node
            .origin()
            .list_buckets()
            .await
            .map_err(s3_error)?
            .into_iter()
            .map(|(name, created)| Bucket {
                name: Some(name),
                creation_date: created.map(Timestamp::from),
                bucket_region: None,
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            ..Default::default()
        }))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.node
            .origin()
            .head_bucket(&req.input.bucket)
            .await
            .map_err(s3_error)?;
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let w = self.writes.as_ref().ok_or_else(read_only)?;
        check_key(&req.input.key)?;
        w.put(self, req.input).await
    }
    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let w = self.writes.as_ref().ok_or_else(read_only)?;
        check_key(&req.input.key)?;
        w.delete(self, req.input).await
    }
    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let w = self.writes.as_ref().ok_or_else(read_only)?;
        w.delete_many(self, req.input).await
    }
    async fn copy_object(
        &self,
        _: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        Err(read_only())
    }
    async fn create_bucket(
        &self,
        _: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        Err(read_only())
    }
    async fn delete_bucket(
        &self,
        _: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        Err(read_only())
    }
    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let w = self.writes.as_ref().ok_or_else(read_only)?;
        check_key(&req.input.key)?;
        w.create_multipart(self, req.input).await
    }
    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let w = self.writes.as_ref().ok_or_else(read_only)?;
        check_key(&req.input.key)?;
        w.upload_part(self, req.input).await
    }
    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let w = self.writes.as_ref().ok_or_else(read_only)?;
        check_key(&req.input.key)?;
        w.complete_multipart(self, req.input).await
    }
    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let w = self.writes.as_ref().ok_or_else(read_only)?;
        check_key(&req.input.key)?;
        w.abort_multipart(self, req.input).await
    }
}

/// `POST /BUCKET?shoal-purge&key=KEY` or `POST /BUCKET?shoal-purge&prefix=PREFIX`:
/// drops cached blocks and versions on this node. Signed like any S3 request.
pub struct PurgeRoute {
    pub node: Arc<Node>,
    pub fanout: Option<Arc<Fanout>>,
    pub open: bool,
}

/// Most bytes of a batch purge body.
const PURGE_BODY_LIMIT: usize = 1 << 20;

/// `key=K` / `prefix=P` lines (values percent-encoded), as nodes send each other.
fn purge_lines(body: &[u8]) -> S3Result<Vec<Target>> {
    let text = std::str::from_utf8(body)
        .map_err(|_| s3_error!(InvalidArgument, "purge body is not UTF-8"))?;
    let decode = |v: &str| {
        percent_encoding::percent_decode_str(v)
            .decode_utf8()
            .map(|s| s.into_owned())
            .map_err(|_| s3_error!(InvalidArgument, "purge value is not UTF-8"))
    };
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let field = |name: &str| {
                l.split('&')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            };
            match (field("key"), field("prefix"), field("keep")) {
                (Some(k), None, None) if !k.is_empty() => Ok(Target::Key(decode(k)?)),
                (Some(k), None, Some(e)) if !k.is_empty() => {
                    Ok(Target::KeyExcept(decode(k)?, decode(e)?))
                }
                (None, Some(p), None) => Ok(Target::Prefix(decode(p)?)),
                _ => Err(s3_error!(
                    InvalidArgument,
                    "purge body lines are key=K, key=K&keep=ETAG or prefix=P"
                )),
            }
        })
        .collect()
}

fn query_param(uri: &http::Uri, name: &str) -> Option<String> {
    uri.query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| {
            percent_encoding::percent_decode_str(v)
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}

#[async_trait::async_trait]
impl s3s::route::S3Route for PurgeRoute {
    fn is_match(
        &self,
        method: &http::Method,
        uri: &http::Uri,
        _: &http::HeaderMap,
        _: &mut http::Extensions,
    ) -> bool {
        method == http::Method::POST && query_param(uri, "shoal-purge").is_some()
    }

    async fn check_access(&self, req: &mut S3Request<s3s::Body>) -> S3Result<()> {
        if self.open || req.credentials.is_some() {
            Ok(())
        } else {
            Err(s3_error!(AccessDenied, "purge needs a signed request"))
        }
    }

    async fn call(&self, req: S3Request<s3s::Body>) -> S3Result<S3Response<s3s::Body>> {
        let path = req.uri.path().trim_start_matches('/');
        let bucket = percent_encoding::percent_decode_str(path.split('/').next().unwrap_or(""))
            .decode_utf8_lossy()
            .into_owned();
        if bucket.is_empty() {
            return Err(s3_error!(
                InvalidArgument,
                "purge needs a bucket: POST /BUCKET?shoal-purge&key=K"
            ));
        }
        let local = query_param(&req.uri, "shoal-local").is_some();
        let mut input = req.input;
        let body = input
            .store_all_limited(PURGE_BODY_LIMIT)
            .await
            .map_err(|_| s3_error!(InvalidArgument, "purge body over 1 MiB"))?;
        let targets = match (
            query_param(&req.uri, "key"),
            query_param(&req.uri, "prefix"),
            query_param(&req.uri, "keep"),
        ) {
            (Some(k), None, None) if !k.is_empty() && body.is_empty() => vec![Target::Key(k)],
            (Some(k), None, Some(e)) if !k.is_empty() && body.is_empty() => {
                vec![Target::KeyExcept(k, e)]
            }
            (None, Some(p), None) if body.is_empty() => vec![Target::Prefix(p)],
            (None, None, None) if !body.is_empty() => purge_lines(&body)?,
            _ => {
                return Err(s3_error!(
                    InvalidArgument,
                    "purge takes exactly one of key=K or prefix=P (or a body of such lines)"
                ))
            }
        };
        let mut n = 0;
        for t in &targets {
            n += invalidate(
                &self.node,
                self.fanout.as_deref(),
                &bucket,
                t.clone(),
                !local,
            )
            .await;
        }
        let what = format!(
            "{} target(s){}",
            targets.len(),
            if local { "" } else { ", passed on" }
        );
        self.node.metrics.purges.inc();
        tracing::info!(bucket = %bucket, "purged {what}: {n} blocks");
        let body = serde_json::json!({ "bucket": bucket, "purged_blocks": n }).to_string();
        let mut resp = S3Response::new(s3s::Body::from(body));
        resp.headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        Ok(resp)
    }
}

/// A listing page as S3 answers it.
fn listed(objects: Vec<ListEntry>, prefixes: Vec<String>) -> (Vec<Object>, Vec<CommonPrefix>) {
    let contents = objects
        .into_iter()
        .map(|o| Object {
            key: Some(o.key),
            size: Some(o.size as i64),
            e_tag: Some(ETag::Strong(o.etag)),
            last_modified: o.last_modified.map(Timestamp::from),
            storage_class: Some(ObjectStorageClass::from_static(
                ObjectStorageClass::STANDARD,
            )),
            ..Default::default()
        })
        .collect();
    let prefixes = prefixes
        .into_iter()
        .map(|p| CommonPrefix { prefix: Some(p) })
        .collect();
    (contents, prefixes)
}
