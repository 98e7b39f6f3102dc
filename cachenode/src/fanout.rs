//! Invalidations passed on to every other node: a purge, or a write or delete
//! through a gateway, is applied here first, then queued and sent in batches to all
//! live nodes of the cluster, in every zone (and its `peers`), so no client waits
//! on the fan-out.
//! A node that misses one (down, cut off) serves nothing stale past `max_age`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use shoal::config::ClusterConfig;
use shoal::node_proto::{self, Purge};
use shoal::route::Membership;
use shoal::store::s3::S3Client;
use tokio::sync::mpsc;

use crate::metrics::{KindLabel, Metrics};

/// How long the first invalidation of a batch waits for company.
const COALESCE: Duration = Duration::from_millis(10);
/// Most invalidations in one batch.
const BATCH: usize = 256;
/// Attempts per node and batch; past them the `max_age` backstop takes over.
const ATTEMPTS: u32 = 3;

pub struct Fanout {
    tx: mpsc::UnboundedSender<(String, Purge)>,
    metrics: Arc<Metrics>,
}

impl Fanout {
    /// Starts the sender for `cluster`'s nodes and peers, except `self_id`.
    pub fn start(
        metrics: Arc<Metrics>,
        cluster: &ClusterConfig,
        region: &str,
        self_id: Option<String>,
    ) -> Fanout {
        // Zones choose where reads go, never who hears an invalidation: the
        // fan-out ranks nothing, so it takes every node of every zone.
        let everyone = ClusterConfig {
            zone: None,
            ..cluster.clone()
        };
        let membership = Membership::from_config(&everyone);
        let _refresh = membership.spawn_refresh();
        let (tx, rx) = mpsc::unbounded_channel();
        let sender = Sender {
            metrics: metrics.clone(),
            region: region.to_owned(),
            membership,
            peers: cluster.peers.clone(),
            self_id,
            cluster: cluster.clone(),
            clients: Default::default(),
        };
        tokio::spawn(sender.run(rx));
        Fanout { tx, metrics }
    }

    /// Queues an invalidation for every other node; never waits.
    pub fn send(&self, bucket: &str, target: Purge) {
        self.metrics.fanout_queued.inc();
        if self.tx.send((bucket.to_owned(), target)).is_err() {
            self.metrics.fanout_queued.dec();
        }
    }
}

struct Sender {
    metrics: Arc<Metrics>,
    region: String,
    membership: Arc<Membership>,
    peers: Vec<String>,
    self_id: Option<String>,
    cluster: ClusterConfig,
    clients: std::sync::Mutex<std::collections::HashMap<String, S3Client>>,
}

impl Sender {
    async fn run(self, mut rx: mpsc::UnboundedReceiver<(String, Purge)>) {
        let me = Arc::new(self);
        while let Some(first) = rx.recv().await {
            let mut batch = vec![first];
            let deadline = tokio::time::Instant::now() + COALESCE;
            while batch.len() < BATCH {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(x)) => batch.push(x),
                    _ => break,
                }
            }
            me.metrics.fanout_queued.dec_by(batch.len() as i64);
            let mut by_bucket: BTreeMap<String, Vec<Purge>> = BTreeMap::new();
            for (b, t) in batch {
                let v = by_bucket.entry(b).or_default();
                if !v.contains(&t) {
                    v.push(t);
                }
            }
            for target in me.targets() {
                let me = me.clone();
                let by_bucket = by_bucket.clone();
                // Each node on its own: a slow or dead one delays nobody.
                tokio::spawn(async move {
                    for (bucket, items) in by_bucket {
                        me.deliver(&target, &bucket, &items).await;
                    }
                });
            }
        }
    }

    fn targets(&self) -> Vec<String> {
        let mut t: Vec<String> = self
            .membership
            .current()
            .nodes()
            .iter()
            .map(|n| n.id.clone())
            .chain(self.peers.iter().cloned())
            .filter(|id| Some(id) != self.self_id.as_ref())
            .collect();
        t.sort();
        t.dedup();
        t
    }

    async fn deliver(&self, id: &str, bucket: &str, items: &[Purge]) {
        let client = self.client(id);
        for attempt in 1..=ATTEMPTS {
            match node_proto::purge::purge_batch(&client, bucket, items).await {
                Ok(_) => {
                    self.metrics
                        .fanout_batches
                        .get_or_create(&KindLabel { kind: "ok" })
                        .inc();
                    return;
                }
                Err(e) if attempt == ATTEMPTS => {
                    self.metrics
                        .fanout_batches
                        .get_or_create(&KindLabel { kind: "failed" })
                        .inc();
                    tracing::warn!(node = %id, "invalidations not delivered (max_age will expire what it holds): {e}");
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(250 << attempt)).await,
            }
        }
    }

    fn client(&self, id: &str) -> S3Client {
        let mut clients = self.clients.lock().unwrap();
        if let Some(c) = clients.get(id) {
            return c.clone();
        }
        let c = node_proto::node_client(&self.cluster, &self.region, id, 4);
        clients.insert(id.to_owned(), c.clone());
        c
    }
}
