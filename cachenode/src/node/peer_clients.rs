//! Clients of the other nodes, one per node and use, made on first use.

use std::collections::HashMap;
use std::sync::Mutex;

use shoal::config::ClusterConfig;
use shoal::store::s3::S3Client;

/// S3 clients of the other nodes for raw asks and for blocks, made on first
/// use.
pub struct PeerClients {
    cluster: ClusterConfig,
    region: String,
    clients: Mutex<HashMap<String, S3Client>>,
    block_clients: Mutex<HashMap<String, S3Client>>,
}

impl PeerClients {
    pub fn new(cluster: &ClusterConfig, region: &str) -> PeerClients {
        PeerClients {
            cluster: cluster.clone(),
            region: region.to_owned(),
            clients: Mutex::default(),
            block_clients: Mutex::default(),
        }
    }

    pub fn get(&self, id: &str) -> S3Client {
        self.clients
            .lock()
            .unwrap()
            .entry(id.to_owned())
            .or_insert_with(|| shoal::node_proto::node_client(&self.cluster, &self.region, id, 8))
            .clone()
    }

    /// A client of node `id` for asks of blocks, whose answers are
    /// acknowledged before their bytes are ready: its own body deadline lets
    /// the first bytes take as long as any node read's first byte may, and the
    /// asker judges the body itself ([`shoal::store::paced_guard`]).
    pub fn for_blocks(&self, id: &str) -> S3Client {
        self.block_clients
            .lock()
            .unwrap()
            .entry(id.to_owned())
            .or_insert_with(|| {
                let mut o = shoal::node_proto::node_options(&self.cluster, &self.region, id, 8);
                o.timeouts.stall = o.timeouts.stall.max(o.timeouts.first_byte);
                S3Client::new(o).expect("node client builds like the origin client")
            })
            .clone()
    }
}
