//! The plugin's zone: `--zone` as given, or, with `--zone-from-node`, the
//! `topology.kubernetes.io/zone` label of its own node read from the Kubernetes
//! API (the downward API hands a pod no label of its node). The zone is
//! reported in NodeGetInfo and passed to every mount, which then prefers the
//! nodes of that zone.

use crate::kube::{KubeApi, KubeError};
use crate::ZONE_KEY;

/// Where the zone comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZoneSource {
    None,
    Given(String),
    /// The label of this Kubernetes node (the plugin's `--node-id`).
    FromNode,
}

impl KubeApi {
    /// The zone label of Kubernetes node `name`, if it has one.
    pub async fn zone_of_node(&self, name: &str) -> Result<Option<String>, KubeError> {
        let body = self.get(&format!("/api/v1/nodes/{name}")).await?;
        Ok(body["metadata"]["labels"][ZONE_KEY]
            .as_str()
            .filter(|z| !z.is_empty())
            .map(str::to_owned))
    }
}

/// The zone to run in. A zone that cannot be read never stops the plugin: it
/// starts with none, says so, and its mounts rank every node.
pub async fn resolve(source: ZoneSource, kube: &KubeApi, node: &str) -> Option<String> {
    match source {
        ZoneSource::None => None,
        ZoneSource::Given(z) => Some(z).filter(|z| !z.is_empty()),
        ZoneSource::FromNode => match kube.zone_of_node(node).await {
            Ok(Some(z)) => {
                tracing::info!(zone = %z, node, "zone from this node's {ZONE_KEY} label");
                Some(z)
            }
            Ok(None) => {
                tracing::warn!(
                    node,
                    "node {node} has no {ZONE_KEY} label: running with no zone, mounts rank every node"
                );
                None
            }
            Err(e) => {
                tracing::error!(
                    node,
                    "cannot read node {node}'s {ZONE_KEY} label from the Kubernetes API ({e}): running with no zone, mounts rank every node (the driver's ClusterRole needs get on nodes)"
                );
                None
            }
        },
    }
}
