//! What follows a gateway's write (`[gateway] writes = true`) in the cache: the
//! write itself is passed on to the origin by [`super::forwarded_writes`], and the
//! origin's answer is the client's answer; nothing the cache does afterwards
//! (invalidating every node, warming the new blocks) can fail it, and a write the
//! origin took is never undone by a cache failure.

use std::sync::Arc;

use shoal::cluster::ClusterReader;
use shoal::node_proto::Purge;
use shoal::store::s3::S3Client;
use shoal::store::ObjectMeta;

use crate::fanout::Fanout;
use crate::metrics::KindLabel;
use crate::node::Node;

/// Largest upload (a PUT or a part) a gateway holds whole on its way to the
/// origin, where it must: a body sent without a length, or one whose checksum
/// comes after it (an aws-chunked trailer). Others stream through unheld.
pub const MAX_HELD: usize = 256 << 20;

#[derive(Clone)]
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
    pub fn count(&self, kind: &'static str) {
        self.node
            .metrics
            .writes
            .get_or_create(&KindLabel { kind })
            .inc();
    }

    /// Drops `target` here and queues it for every other node.
    pub async fn invalidate(&self, bucket: &str, target: Purge) {
        self.node
            .invalidate(self.fanout.as_deref(), bucket, target, true)
            .await;
    }

    /// After the origin took a new version: invalidate every older one on every
    /// node, then warm the new one if asked to.
    pub async fn written(&self, bucket: &str, key: &str, etag: &str, size: u64) {
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
