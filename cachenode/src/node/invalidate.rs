//! Dropping what changed: one object, every version of it but one, or a prefix;
//! here, and (through the fan-out) on every other node.

use shoal::node_proto::Purge;

use super::Node;
use crate::fanout::Fanout;
use crate::metrics::KindLabel;

impl Node {
    /// Drops every cached block and version of one object; returns blocks dropped.
    pub async fn purge_object(&self, bucket: &str, key: &str) -> u64 {
        self.forget_meta(bucket, key);
        self.tiers.remove_object(bucket, key).await
    }

    /// Drops every version of one object but `etag` (an overwrite whose new
    /// version may already be warm); returns blocks dropped.
    pub async fn purge_other_versions(&self, bucket: &str, key: &str, etag: &str) -> u64 {
        self.forget_meta_unless(bucket, key, etag);
        self.tiers.remove_other_versions(bucket, key, etag).await
    }

    /// Drops everything under a prefix; returns blocks dropped.
    pub async fn purge_prefix(&self, bucket: &str, prefix: &str) -> u64 {
        self.forget_prefix(bucket, prefix);
        self.tiers.remove_prefix(bucket, prefix).await
    }

    /// Applies `target` here and, if `pass_on` (it did not come from another node),
    /// queues it for every other node; returns blocks dropped here.
    pub async fn invalidate(
        &self,
        fanout: Option<&Fanout>,
        bucket: &str,
        target: Purge,
        pass_on: bool,
    ) -> u64 {
        let n = match &target {
            Purge::Key(k) => self.purge_object(bucket, k).await,
            Purge::Prefix(p) => self.purge_prefix(bucket, p).await,
            Purge::KeyExcept(k, e) => self.purge_other_versions(bucket, k, e).await,
        };
        let kind = if pass_on { "local" } else { "fanout" };
        self.metrics
            .invalidations
            .get_or_create(&KindLabel { kind })
            .inc();
        if pass_on {
            if let Some(f) = fanout {
                f.send(bucket, target);
            }
        }
        n
    }
}
