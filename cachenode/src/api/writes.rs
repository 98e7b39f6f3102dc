//! Writes through a gateway (`[gateway] writes = true`): the client's signature was
//! checked by the S3 layer; the write goes to the origin signed with the gateway's
//! origin credentials. The origin's answer is the client's answer: nothing the cache
//! does afterwards (invalidating every node, warming the new blocks) can fail or
//! delay it, and a write the origin took is never undone by a cache failure.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use s3s::dto::*;
use s3s::{s3_error, S3Response, S3Result};
use shoal::cluster::ClusterReader;
use shoal::node_proto::Purge;
use shoal::store::s3::S3Client;
use shoal::store::ObjectMeta;

use super::error::store_error;
use crate::fanout::Fanout;
use crate::metrics::KindLabel;
use crate::node::Node;

/// An ETag condition as a header value.
fn condition(c: &ETagCondition) -> String {
    match c {
        ETagCondition::Any => "*".to_owned(),
        ETagCondition::ETag(e) => format!("\"{}\"", e.value()),
    }
}

/// What a client's PUT asks of the origin beyond its bytes: what the object is
/// stored with and the conditions of the write, as the client sent them.
fn put_headers(i: &PutObjectInput) -> Vec<(String, String)> {
    let mut h: Vec<(String, String)> = Vec::new();
    let mut add = |name: &str, value: Option<String>| {
        if let Some(v) = value {
            h.push((name.to_owned(), v));
        }
    };
    add("if-match", i.if_match.as_ref().map(condition));
    add("if-none-match", i.if_none_match.as_ref().map(condition));
    add("content-type", i.content_type.clone());
    add("cache-control", i.cache_control.clone());
    add("content-disposition", i.content_disposition.clone());
    add("content-encoding", i.content_encoding.clone());
    add("content-language", i.content_language.clone());
    add(
        "expires",
        i.expires
            .as_ref()
            .map(|t| httpdate::fmt_http_date(super::objects::time(t))),
    );
    add(
        "x-amz-storage-class",
        i.storage_class.as_ref().map(|c| c.as_str().to_owned()),
    );
    add("x-amz-tagging", i.tagging.clone());
    add(
        "x-amz-website-redirect-location",
        i.website_redirect_location.clone(),
    );
    if let Some(m) = &i.metadata {
        let mut m: Vec<_> = m.iter().collect();
        m.sort();
        for (k, v) in m {
            h.push((format!("x-amz-meta-{}", k.to_ascii_lowercase()), v.clone()));
        }
    }
    h
}

/// Largest single PUT (or upload part) a gateway buffers on its way to the origin;
/// larger objects go as multipart uploads, which S3 tools do on their own.
pub const MAX_PUT: usize = 256 << 20;

pub struct Writes {
    pub node: Arc<Node>,
    /// The origin writes go to, signed with the gateway's origin credentials.
    pub origin: S3Client,
    /// Where the invalidations that follow a write go on to other nodes.
    pub fanout: Option<Arc<Fanout>>,
    /// With `warm_on_write`: the cluster whose owners fetch a new object's blocks.
    pub warm: Option<Arc<ClusterReader>>,
}

impl Writes {
    fn count(&self, kind: &'static str) {
        self.node
            .metrics
            .writes
            .get_or_create(&KindLabel { kind })
            .inc();
    }

    /// Drops `target` here and queues it for every other node.
    async fn invalidate(&self, bucket: &str, target: Purge) {
        self.node
            .invalidate(self.fanout.as_deref(), bucket, target, true)
            .await;
    }

    pub async fn put(&self, mut i: PutObjectInput) -> S3Result<S3Response<PutObjectOutput>> {
        let headers = put_headers(&i);
        let body = collect(i.body.take(), MAX_PUT).await?;
        let size = body.len() as u64;
        let etag = self
            .origin
            .put_object_with(&i.bucket, &i.key, body, headers)
            .await
            .map_err(store_error)?;
        self.count("put");
        self.written(&i.bucket, &i.key, &etag, size).await;
        Ok(S3Response::new(PutObjectOutput {
            e_tag: Some(ETag::Strong(etag)),
            ..Default::default()
        }))
    }

    /// After the origin took a new version: invalidate every older one on every
    /// node, then warm the new one if asked to.
    async fn written(&self, bucket: &str, key: &str, etag: &str, size: u64) {
        // The new version stays: the warm below may land before the invalidation does.
        self.invalidate(bucket, Purge::KeyExcept(key.to_owned(), etag.to_owned()))
            .await;
        if let Some(reader) = &self.warm {
            let meta = ObjectMeta {
                size,
                etag: etag.to_owned(),
                ..Default::default()
            };
            tokio::spawn(warm(
                reader.clone(),
                self.node.clone(),
                bucket.to_owned(),
                key.to_owned(),
                meta,
            ));
        }
    }

    pub async fn create_multipart(
        &self,
        i: CreateMultipartUploadInput,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let id = self
            .origin
            .create_multipart_upload(&i.bucket, &i.key)
            .await
            .map_err(store_error)?;
        self.count("multipart_create");
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(i.bucket),
            key: Some(i.key),
            upload_id: Some(id),
            ..Default::default()
        }))
    }

    pub async fn upload_part(&self, i: UploadPartInput) -> S3Result<S3Response<UploadPartOutput>> {
        let body = collect(i.body, MAX_PUT).await?;
        let etag = self
            .origin
            .upload_part(&i.bucket, &i.key, &i.upload_id, i.part_number, body)
            .await
            .map_err(store_error)?;
        self.count("multipart_part");
        Ok(S3Response::new(UploadPartOutput {
            e_tag: Some(ETag::Strong(etag)),
            ..Default::default()
        }))
    }

    pub async fn complete_multipart(
        &self,
        i: CompleteMultipartUploadInput,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let parts: Vec<(i32, String)> = i
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
        let origin = &self.origin;
        let conditions = [
            ("if-match", &i.if_match),
            ("if-none-match", &i.if_none_match),
        ]
        .into_iter()
        .filter_map(|(name, c)| Some((name.to_owned(), condition(c.as_ref()?))))
        .collect();
        let etag = origin
            .complete_multipart_upload_with(&i.bucket, &i.key, &i.upload_id, &parts, conditions)
            .await
            .map_err(store_error)?;
        self.count("multipart_complete");
        // The answer names no size; the version just made does.
        let size = origin
            .head_object(&shoal::store::GetObject::new(&*i.bucket, &*i.key).if_match(&etag))
            .await
            .map(|m| m.size);
        match size {
            Ok(size) => self.written(&i.bucket, &i.key, &etag, size).await,
            // Overwritten again already: drop everything, warm nothing.
            Err(_) => self.invalidate(&i.bucket, Purge::Key(i.key.clone())).await,
        }
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            bucket: Some(i.bucket),
            key: Some(i.key),
            e_tag: Some(ETag::Strong(etag)),
            ..Default::default()
        }))
    }

    pub async fn abort_multipart(
        &self,
        i: AbortMultipartUploadInput,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        self.origin
            .abort_multipart_upload(&i.bucket, &i.key, &i.upload_id)
            .await
            .map_err(store_error)?;
        self.count("multipart_abort");
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    pub async fn delete(&self, i: DeleteObjectInput) -> S3Result<S3Response<DeleteObjectOutput>> {
        // The origin first: a delete is never lost to a cache failure.
        self.origin
            .delete_object(&i.bucket, &i.key)
            .await
            .map_err(store_error)?;
        self.count("delete");
        self.invalidate(&i.bucket, Purge::Key(i.key.clone())).await;
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    pub async fn delete_many(
        &self,
        i: DeleteObjectsInput,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let quiet = i.delete.quiet.unwrap_or(false);
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for o in i.delete.objects {
            let key = o.key;
            let r = match super::error::check_key(&key) {
                Err(e) => Err(e),
                Ok(()) => self
                    .origin
                    .delete_object(&i.bucket, &key)
                    .await
                    .map_err(store_error),
            };
            match r {
                Ok(()) => {
                    self.count("delete");
                    self.invalidate(&i.bucket, Purge::Key(key.clone())).await;
                    if !quiet {
                        deleted.push(DeletedObject {
                            key: Some(key),
                            ..Default::default()
                        });
                    }
                }
                Err(e) => errors.push(Error {
                    key: Some(key),
                    code: Some(e.code().as_str().to_owned()),
                    message: e.message().map(str::to_owned),
                    ..Default::default()
                }),
            }
        }
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: (!errors.is_empty()).then_some(errors),
            ..Default::default()
        }))
    }
}

async fn collect(body: Option<StreamingBlob>, limit: usize) -> S3Result<Bytes> {
    let Some(mut body) = body else {
        return Ok(Bytes::new());
    };
    let mut buf = BytesMut::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| s3_error!(IncompleteBody, "request body: {e}"))?;
        if buf.len() + chunk.len() > limit {
            return Err(s3_error!(
                EntityTooLarge,
                "a PUT through a gateway is at most {limit} bytes"
            ));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// Has each cluster block of a new object fetched by its owner, so the object is
/// hot cluster-wide before anyone reads it.
async fn warm(
    reader: Arc<ClusterReader>,
    node: Arc<crate::node::Node>,
    bucket: String,
    key: String,
    meta: ObjectMeta,
) {
    let blocks = meta.size.div_ceil(reader.block_size());
    for index in 0..blocks {
        let result = match reader.warm_block(&bucket, &key, &meta, index).await {
            Ok(_) => "ok",
            Err(e) => {
                tracing::warn!(bucket = %bucket, key = %key, index, "warming after a write failed: {e}");
                "failed"
            }
        };
        node.metrics
            .warmed_blocks
            .get_or_create(&KindLabel { kind: result })
            .inc();
    }
    node.metrics.warms_done.inc();
}
