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
use shoal::s3::ObjectMeta;

use crate::fanout::Target;
use crate::metrics::KindLabel;
use crate::s3api::{s3_error, NodeApi};

/// Largest single PUT a gateway buffers on its way to the origin.
pub const MAX_PUT: usize = 256 << 20;

pub struct Writes {
    /// With `warm_on_write`: the cluster whose owners fetch a new object's blocks.
    pub warm: Option<Arc<ClusterReader>>,
}

fn count(api: &NodeApi, kind: &'static str) {
    api.node
        .metrics
        .writes
        .get_or_create(&KindLabel { kind })
        .inc();
}

impl Writes {
    pub async fn put(
        &self,
        api: &NodeApi,
        i: PutObjectInput,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let body = collect(i.body, MAX_PUT).await?;
        let size = body.len() as u64;
        let etag = api
            .node
            .origin()
            .put_object(&i.bucket, &i.key, body)
            .await
            .map_err(s3_error)?;
        count(api, "put");
        // Whatever any node holds of older versions goes, everywhere; the new one
        // stays (the warm below may land before the invalidation does).
        api.invalidate(&i.bucket, Target::KeyExcept(i.key.clone(), etag.clone()))
            .await;
        if let Some(reader) = &self.warm {
            let meta = ObjectMeta {
                size,
                etag: etag.clone(),
                last_modified: None,
                content_type: None,
            };
            tokio::spawn(warm(
                reader.clone(),
                api.node.clone(),
                i.bucket.clone(),
                i.key.clone(),
                meta,
            ));
        }
        Ok(S3Response::new(PutObjectOutput {
            e_tag: Some(ETag::Strong(etag)),
            ..Default::default()
        }))
    }

    pub async fn delete(
        &self,
        api: &NodeApi,
        i: DeleteObjectInput,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        // The origin first: a delete is never lost to a cache failure.
        api.node
            .origin()
            .delete_object(&i.bucket, &i.key)
            .await
            .map_err(s3_error)?;
        count(api, "delete");
        api.invalidate(&i.bucket, Target::Key(i.key.clone())).await;
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    pub async fn delete_many(
        &self,
        api: &NodeApi,
        i: DeleteObjectsInput,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let quiet = i.delete.quiet.unwrap_or(false);
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for o in i.delete.objects {
            let key = o.key;
            let r = match shoal::s3::key_problem(&key) {
                Some(why) => Err(s3_error!(InvalidArgument, "invalid key: {why}")),
                None => api
                    .node
                    .origin()
                    .delete_object(&i.bucket, &key)
                    .await
                    .map_err(s3_error),
            };
            match r {
                Ok(()) => {
                    count(api, "delete");
                    api.invalidate(&i.bucket, Target::Key(key.clone())).await;
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
