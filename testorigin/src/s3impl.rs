//! The S3 operations the origin answers, on top of [`Store`].
//!
//! `s3s` parses requests, checks SigV4 and writes S3's XML; this file only decides
//! answers, as S3 decides them: conditions and ranges ([`crate::objects`]),
//! listings ([`crate::lists`]), buckets and multipart uploads here.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result, S3};

use crate::errors::{missing, upload_error};
use crate::lists::{self, Encoder};
use crate::objects::{
    attrs_of, content_range, readable, restore_header, span, stored_headers, Conditions, Overrides,
};
use crate::store::{Store, StoredObject};

#[derive(Clone)]
pub struct MemS3 {
    pub store: Arc<Store>,
}

async fn read_body(body: Option<StreamingBlob>) -> S3Result<Bytes> {
    let mut data = BytesMut::new();
    if let Some(mut body) = body {
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| s3_error!(IncompleteBody, "{e}"))?;
            data.extend_from_slice(&chunk);
        }
    }
    Ok(data.freeze())
}

fn etag_of(obj: &StoredObject) -> ETag {
    ETag::Strong(obj.etag.clone())
}

#[async_trait::async_trait]
impl S3 for MemS3 {
    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        if !self.store.create_bucket(&req.input.bucket) {
            return Err(s3_error!(BucketAlreadyOwnedByYou));
        }
        Ok(S3Response::new(CreateBucketOutput::default()))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        if !self.store.bucket_exists(&req.input.bucket) {
            return Err(s3_error!(NoSuchBucket));
        }
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        if !self.store.bucket_exists(&req.input.bucket) {
            return Err(s3_error!(NoSuchBucket));
        }
        Ok(S3Response::new(GetBucketLocationOutput::default()))
    }

    async fn list_buckets(
        &self,
        _req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let buckets = self
            .store
            .bucket_names()
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

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let input = req.input;
        if !self.store.bucket_exists(&input.bucket) {
            return Err(s3_error!(NoSuchBucket));
        }
        // A conditional write, as S3 takes it: If-None-Match: * only where no
        // object is, If-Match only over the version named.
        let current = self.store.get(&input.bucket, &input.key).ok();
        let held = |c: &ETagCondition| match (c, &current) {
            (ETagCondition::Any, Some(_)) => true,
            (ETagCondition::ETag(e), Some(o)) => e.value() == o.etag,
            (_, None) => false,
        };
        if input.if_none_match.as_ref().is_some_and(held) {
            return Err(s3_error!(
                PreconditionFailed,
                "At least one of the pre-conditions you specified did not hold"
            ));
        }
        if let Some(c) = &input.if_match {
            if current.is_none() {
                return Err(s3_error!(NoSuchKey));
            }
            if !held(c) {
                return Err(s3_error!(
                    PreconditionFailed,
                    "At least one of the pre-conditions you specified did not hold"
                ));
            }
        }
        let attrs = attrs_of!(input);
        let data = read_body(input.body).await?;
        let etag = self
            .store
            .put_with(&input.bucket, &input.key, data, attrs)
            .ok_or_else(|| s3_error!(NoSuchBucket))?;
        Ok(S3Response::new(PutObjectOutput {
            e_tag: Some(ETag::Strong(etag)),
            ..Default::default()
        }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let i = req.input;
        let id = self
            .store
            .create_upload(&i.bucket, &i.key, attrs_of!(i))
            .map_err(missing)?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(i.bucket),
            key: Some(i.key),
            upload_id: Some(id),
            ..Default::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let i = req.input;
        let data = read_body(i.body).await?;
        let etag = self
            .store
            .upload_part(&i.upload_id, i.part_number, data)
            .map_err(upload_error)?;
        Ok(S3Response::new(UploadPartOutput {
            e_tag: Some(ETag::Strong(etag)),
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let i = req.input;
        let listed: Vec<(i32, String)> = i
            .multipart_upload
            .and_then(|m| m.parts)
            .unwrap_or_default()
            .into_iter()
            .map(|p| {
                (
                    p.part_number.unwrap_or(0),
                    p.e_tag.map(|e| e.value().to_owned()).unwrap_or_default(),
                )
            })
            .collect();
        if listed.is_empty() {
            return Err(s3_error!(MalformedXML, "no parts listed"));
        }
        let (bucket, key, etag) = self
            .store
            .complete_upload(&i.upload_id, &listed)
            .map_err(upload_error)?;
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            bucket: Some(bucket),
            key: Some(key),
            e_tag: Some(ETag::Strong(etag)),
            ..Default::default()
        }))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        self.store
            .abort_upload(&req.input.upload_id)
            .map_err(upload_error)?;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let i = req.input;
        let CopySource::Bucket { bucket, key, .. } = &i.copy_source else {
            return Err(s3_error!(NotImplemented, "access point copy sources"));
        };
        if !self.store.bucket_exists(&i.bucket) {
            return Err(s3_error!(NoSuchBucket));
        }
        let src = self.store.get(bucket, key).map_err(missing)?;
        // S3's order for x-amz-copy-source-if-*: If-Match, else
        // If-Unmodified-Since; If-None-Match, else If-Modified-Since; either
        // failing fails the copy.
        let failed = match (&i.copy_source_if_match, &i.copy_source_if_unmodified_since) {
            (Some(c), _) => !etag_held(c, &src.etag),
            (None, Some(t)) => src.last_modified > crate::objects::time(t),
            (None, None) => false,
        } || match (
            &i.copy_source_if_none_match,
            &i.copy_source_if_modified_since,
        ) {
            (Some(c), _) => etag_held(c, &src.etag),
            (None, Some(t)) => src.last_modified <= crate::objects::time(t),
            (None, None) => false,
        };
        if failed {
            return Err(s3_error!(
                PreconditionFailed,
                "At least one of the pre-conditions you specified did not hold"
            ));
        }
        let replace = i
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
        if !replace && **bucket == *i.bucket && **key == *i.key {
            return Err(s3_error!(
                InvalidRequest,
                "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes."
            ));
        }
        let attrs = if replace {
            attrs_of!(i)
        } else {
            src.attrs.clone()
        };
        let etag = self
            .store
            .put_with(&i.bucket, &i.key, src.data.clone(), attrs)
            .ok_or_else(|| s3_error!(NoSuchBucket))?;
        let stored = self.store.get(&i.bucket, &i.key).map_err(missing)?;
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: Some(ETag::Strong(etag)),
                last_modified: Some(Timestamp::from(stored.last_modified)),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        self.store
            .delete(&req.input.bucket, &req.input.key)
            .map_err(missing)?;
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let input = req.input;
        let obj = self.store.get(&input.bucket, &input.key).map_err(missing)?;
        readable(&obj, input.sse_customer_key_md5.as_deref(), false)?;
        Conditions {
            if_match: input.if_match.as_ref(),
            if_none_match: input.if_none_match.as_ref(),
            if_modified_since: input.if_modified_since.as_ref(),
            if_unmodified_since: input.if_unmodified_since.as_ref(),
        }
        .check(&obj)?;
        let len = obj.data.len() as u64;
        let range = span(&obj, input.part_number, input.range)?;
        let mut out = HeadObjectOutput {
            content_length: Some(range.as_ref().map_or(len, |r| r.end - r.start) as i64),
            content_range: range.as_ref().map(|r| content_range(r, len)),
            e_tag: Some(etag_of(&obj)),
            last_modified: Some(Timestamp::from(obj.last_modified)),
            accept_ranges: Some("bytes".into()),
            ..Default::default()
        };
        stored_headers!(out, &obj.attrs, Overrides::default());
        out.restore = restore_header(&obj);
        out.parts_count = parts_count(&obj, input.part_number);
        Ok(S3Response::new(out))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let input = req.input;
        let obj = self.store.get(&input.bucket, &input.key).map_err(missing)?;
        readable(&obj, input.sse_customer_key_md5.as_deref(), true)?;
        Conditions {
            if_match: input.if_match.as_ref(),
            if_none_match: input.if_none_match.as_ref(),
            if_modified_since: input.if_modified_since.as_ref(),
            if_unmodified_since: input.if_unmodified_since.as_ref(),
        }
        .check(&obj)?;
        let len = obj.data.len() as u64;
        let range = span(&obj, input.part_number, input.range)?;
        let body = match &range {
            Some(r) => obj.data.slice(r.start as usize..r.end as usize),
            None => obj.data.clone(),
        };
        let mut out = GetObjectOutput {
            content_length: Some(body.len() as i64),
            content_range: range.as_ref().map(|r| content_range(r, len)),
            body: Some(StreamingBlob::wrap(chunked(body))),
            e_tag: Some(etag_of(&obj)),
            last_modified: Some(Timestamp::from(obj.last_modified)),
            accept_ranges: Some("bytes".into()),
            ..Default::default()
        };
        let over = Overrides {
            content_type: input.response_content_type,
            cache_control: input.response_cache_control,
            content_disposition: input.response_content_disposition,
            content_encoding: input.response_content_encoding,
            content_language: input.response_content_language,
            expires: input.response_expires,
        };
        stored_headers!(out, &obj.attrs, over);
        out.parts_count = parts_count(&obj, input.part_number);
        Ok(S3Response::new(out))
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let input = req.input;
        let prefix = input.prefix.clone().unwrap_or_default();
        let max_keys = input.max_keys.unwrap_or(1000).clamp(0, 1000) as usize;
        let page = lists::page(
            &self.store,
            &input.bucket,
            &prefix,
            input.delimiter.as_deref(),
            input.marker.as_deref(),
            max_keys,
        )?;
        let enc = Encoder::new(input.encoding_type.as_ref());
        let (contents, common_prefixes) = lists::entries(&page, &enc);
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(input.bucket),
            prefix: Some(enc.s(prefix)),
            marker: enc.opt(input.marker),
            delimiter: enc.opt(input.delimiter),
            max_keys: Some(max_keys as i32),
            is_truncated: Some(page.truncated),
            // Version 1 markers are plain keys; a marker at a common prefix skips it.
            next_marker: enc.opt(
                page.next_after
                    .filter(|_| page.truncated)
                    .map(|a| a.trim_end_matches(char::MAX).to_owned()),
            ),
            encoding_type: input.encoding_type,
            contents: (!contents.is_empty()).then_some(contents),
            common_prefixes: (!common_prefixes.is_empty()).then_some(common_prefixes),
            ..Default::default()
        }))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let input = req.input;
        let prefix = input.prefix.clone().unwrap_or_default();
        let max_keys = input.max_keys.unwrap_or(1000).clamp(0, 1000) as usize;
        let token = match input.continuation_token.as_deref() {
            Some(t) => Some(
                hex::decode(t)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .ok_or_else(|| {
                        s3_error!(
                            InvalidArgument,
                            "The continuation token provided is incorrect"
                        )
                    })?,
            ),
            None => None,
        };
        let after = token.as_deref().or(input.start_after.as_deref());
        let page = lists::page(
            &self.store,
            &input.bucket,
            &prefix,
            input.delimiter.as_deref(),
            after,
            max_keys,
        )?;
        let enc = Encoder::new(input.encoding_type.as_ref());
        let key_count = (page.objects.len() + page.common_prefixes.len()) as i32;
        let (contents, common_prefixes) = lists::entries(&page, &enc);
        let owner = input.fetch_owner.unwrap_or(false).then(owner);
        let contents = contents
            .into_iter()
            .map(|o| Object {
                owner: owner.clone(),
                ..o
            })
            .collect::<Vec<_>>();
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: Some(enc.s(prefix)),
            delimiter: enc.opt(input.delimiter),
            max_keys: Some(max_keys as i32),
            key_count: Some(key_count),
            is_truncated: Some(page.truncated),
            continuation_token: input.continuation_token,
            next_continuation_token: page
                .next_after
                .filter(|_| page.truncated)
                .map(|a| hex::encode(a.as_bytes())),
            start_after: enc.opt(input.start_after),
            encoding_type: input.encoding_type,
            contents: (!contents.is_empty()).then_some(contents),
            common_prefixes: (!common_prefixes.is_empty()).then_some(common_prefixes),
            ..Default::default()
        }))
    }
}

/// The one account that owns every bucket here.
fn owner() -> Owner {
    Owner {
        display_name: Some("shoal-test".into()),
        id: Some("75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a".into()),
    }
}

/// `x-amz-mp-parts-count`, answered to a read of one part of a multipart object.
fn parts_count(obj: &StoredObject, part_number: Option<i32>) -> Option<i32> {
    part_number
        .filter(|_| !obj.parts.is_empty())
        .map(|_| obj.parts.len() as i32)
}

/// Splits a body into 256 KiB chunks so the fault layer can pace and cut it.
fn chunked(
    body: Bytes,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send + Sync + 'static {
    const CHUNK: usize = 256 * 1024;
    let n = body.len().div_ceil(CHUNK);
    futures_util::stream::iter((0..n).map(move |i| {
        let end = ((i + 1) * CHUNK).min(body.len());
        Ok(body.slice(i * CHUNK..end))
    }))
}

/// Whether an ETag condition holds for an object whose ETag is `etag`.
fn etag_held(c: &ETagCondition, etag: &str) -> bool {
    match c {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => e.value() == etag,
    }
}
