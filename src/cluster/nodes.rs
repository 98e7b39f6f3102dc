//! How the reader reaches a node: a store per node id. Over the network that is an
//! S3 client with the cluster's credentials and deadlines; in a test, a double.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::config::ClusterConfig;
use crate::store::ObjectStore;

/// The store that answers for node `id`.
pub trait Nodes: Send + Sync {
    fn store(&self, id: &str) -> Arc<dyn ObjectStore>;
}

/// Nodes over S3, one pooled client each, made on first use.
pub struct S3Nodes {
    cluster: ClusterConfig,
    region: String,
    pool_idle_per_host: usize,
    clients: Mutex<HashMap<String, Arc<dyn ObjectStore>>>,
}

impl S3Nodes {
    pub fn new(cluster: &ClusterConfig, region: &str, pool_idle_per_host: usize) -> S3Nodes {
        S3Nodes {
            cluster: cluster.clone(),
            region: region.to_owned(),
            pool_idle_per_host,
            clients: Mutex::new(HashMap::new()),
        }
    }
}

impl Nodes for S3Nodes {
    fn store(&self, id: &str) -> Arc<dyn ObjectStore> {
        let mut clients = self.clients.lock().unwrap();
        clients
            .entry(id.to_owned())
            .or_insert_with(|| {
                Arc::new(crate::node_proto::node_client(
                    &self.cluster,
                    &self.region,
                    id,
                    self.pool_idle_per_host,
                ))
            })
            .clone()
    }
}

/// Fixed stores by id, for tests and embedders with their own transport.
impl Nodes for HashMap<String, Arc<dyn ObjectStore>> {
    fn store(&self, id: &str) -> Arc<dyn ObjectStore> {
        self.get(id)
            .cloned()
            .unwrap_or_else(|| panic!("no store for node {id}"))
    }
}
