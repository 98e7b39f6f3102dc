//! Requests the rules leave uncached: answered straight from the origin, nothing
//! kept, each counted in `shoal_node_uncached_requests_total`.

use futures_util::TryStreamExt;
use s3s::dto::*;
use s3s::{S3Response, S3Result};
use shoal::store::{ByteRange, GetObject};

use super::error::store_error;
use super::objects::condition_etag;
use crate::node::{Node, SyncStream};

fn condition(c: &Option<ETagCondition>) -> Option<String> {
    condition_etag(c.as_ref()?)
}

fn request(bucket: &str, key: &str, range: Option<Range>) -> GetObject {
    let mut req = GetObject::new(bucket, key);
    req.range = range.map(|r| match r {
        Range::Int { first, last } => ByteRange::From { first, last },
        Range::Suffix { length } => ByteRange::Suffix(length),
    });
    req
}

pub async fn get(node: &Node, i: GetObjectInput) -> S3Result<S3Response<GetObjectOutput>> {
    node.metrics.uncached_requests.inc();
    let mut req = request(&i.bucket, &i.key, i.range);
    req.if_match = condition(&i.if_match);
    req.if_none_match = condition(&i.if_none_match);
    let resp = node.origin().get_object(&req).await.map_err(store_error)?;
    let meta = resp.meta.clone();
    let content_range = i.range.map(|_| {
        format!(
            "bytes {}-{}/{}",
            resp.start,
            resp.end.saturating_sub(1),
            meta.size
        )
    });
    Ok(S3Response::new(GetObjectOutput {
        content_length: Some((resp.end - resp.start) as i64),
        body: Some(StreamingBlob::wrap(SyncStream::new(
            resp.body.map_err(std::io::Error::other),
        ))),
        content_range,
        e_tag: Some(ETag::Strong(meta.etag)),
        last_modified: meta.last_modified.map(Timestamp::from),
        accept_ranges: Some("bytes".into()),
        content_type: meta.content_type,
        ..Default::default()
    }))
}

pub async fn head(node: &Node, i: HeadObjectInput) -> S3Result<S3Response<HeadObjectOutput>> {
    node.metrics.uncached_requests.inc();
    let mut req = request(&i.bucket, &i.key, None);
    req.if_match = condition(&i.if_match);
    req.if_none_match = condition(&i.if_none_match);
    let meta = node.origin().head_object(&req).await.map_err(store_error)?;
    Ok(S3Response::new(HeadObjectOutput {
        content_length: Some(meta.size as i64),
        e_tag: Some(ETag::Strong(meta.etag)),
        last_modified: meta.last_modified.map(Timestamp::from),
        accept_ranges: Some("bytes".into()),
        content_type: meta.content_type,
        ..Default::default()
    }))
}
