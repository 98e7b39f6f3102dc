//! Listings and bucket checks, passed to the origin uncached so ordinary S3 tools
//! work against a node.

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};
use shoal::store::{ListEntry, ListPage, ListRequest};

use super::error::store_error;
use super::NodeApi;
use crate::metrics::KindLabel;

impl NodeApi {
    /// Listings of buckets and of objects are one kind of origin request.
    fn count_origin_list(&self) {
        self.node
            .metrics
            .origin_requests
            .get_or_create(&KindLabel { kind: "list" })
            .inc();
    }

    async fn list_origin(&self, req: ListRequest) -> S3Result<ListPage> {
        self.count_origin_list();
        self.node
            .origin()
            .list_objects_v2(&req)
            .await
            .map_err(store_error)
    }
}

pub async fn list_v2(
    api: &NodeApi,
    req: S3Request<ListObjectsV2Input>,
) -> S3Result<S3Response<ListObjectsV2Output>> {
    let i = req.input;
    let page = api
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
pub async fn list_v1(
    api: &NodeApi,
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
    let page = api
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

pub async fn list_buckets(api: &NodeApi) -> S3Result<S3Response<ListBucketsOutput>> {
    api.count_origin_list();
    let buckets = api
        .node
        .origin()
        .list_buckets()
        .await
        .map_err(store_error)?
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

pub async fn head_bucket(
    api: &NodeApi,
    req: S3Request<HeadBucketInput>,
) -> S3Result<S3Response<HeadBucketOutput>> {
    api.node
        .origin()
        .head_bucket(&req.input.bucket)
        .await
        .map_err(store_error)?;
    Ok(S3Response::new(HeadBucketOutput::default()))
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
