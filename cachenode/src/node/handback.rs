//! A node leaving on purpose hands its blocks back (`shoal drain`): it lists
//! the blocks it holds and owns, each with the node that owns it once this one
//! is gone (its runner-up, the node a previous-owner fill would ask), and each
//! such node takes its share from the leaving one with
//! `Cache-Control: only-if-cached`, as a previous-owner fill does: the same
//! ETag and range checks, and nothing asked of the origin. Once it is gone its
//! blocks are served where the readers go next, not fetched again.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};
use shoal::blocks::BlockKey;

use super::{Node, NodeError};

/// How long the leaving node has to start answering one block.
const TAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a hand-back cannot be done here.
#[derive(Debug, thiserror::Error)]
pub enum HandbackError {
    #[error("this node does not know its cluster and its own id in it ([cluster], node.id or a listen address, node.peer_fill_timeout above 0s)")]
    NoCluster,
    #[error("{0} is not a node of this cluster")]
    NotMember(String),
    #[error("bad block line {0}: {1}")]
    BadLine(usize, String),
}

/// One block of a hand-back.
#[derive(Debug, Clone)]
pub struct Handed {
    pub key: BlockKey,
    /// The object's size, when known.
    pub size: Option<u64>,
    pub len: u64,
    /// Who owns it once the leaving node is gone.
    pub to: String,
}

impl Handed {
    pub fn to_json(&self) -> Value {
        json!({
            "k": &*self.key.key, "e": &*self.key.etag, "bs": self.key.block_size,
            "i": self.key.index, "len": self.len, "size": self.size, "to": self.to,
        })
    }

    pub fn from_json(bucket: &str, v: &Value) -> Option<Handed> {
        Some(Handed {
            key: BlockKey::new(
                bucket,
                v["k"].as_str()?,
                v["e"].as_str()?,
                v["bs"].as_u64().filter(|&b| b > 0)?,
                v["i"].as_u64()?,
            ),
            size: v["size"].as_u64(),
            len: v["len"].as_u64()?,
            to: v["to"].as_str().unwrap_or_default().to_owned(),
        })
    }
}

/// What taking blocks from a leaving node came to.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct Taken {
    /// Blocks brought from the leaving node.
    pub taken: u64,
    pub bytes: u64,
    /// Blocks this node held already.
    pub held: u64,
    /// Blocks the leaving node no longer held, or that failed (its log says).
    pub missed: u64,
}

/// Block files under `dir/blocks`, newest first: their keys and data lengths.
fn on_disk(dir: &Path) -> Vec<(SystemTime, BlockKey, u64)> {
    use std::io::Read;
    let mut found = Vec::new();
    let Ok(subs) = std::fs::read_dir(dir.join("blocks")) else {
        return found;
    };
    for f in subs
        .flatten()
        .filter_map(|s| std::fs::read_dir(s.path()).ok())
        .flatten()
        .flatten()
    {
        let path: PathBuf = f.path();
        if path.extension().is_none_or(|e| e != "blk") {
            continue;
        }
        let Ok(mut file) = std::fs::File::open(&path) else {
            continue;
        };
        let mut buf = vec![0u8; 4096];
        let n = file.read(&mut buf).unwrap_or(0);
        buf.truncate(n);
        // A header longer than 4 KiB (a very long key) is read whole.
        let header = match shoal::blocks::decode_header(&buf) {
            Err(shoal::blocks::DecodeError::HeaderLength(_)) => std::fs::read(&path)
                .ok()
                .and_then(|all| shoal::blocks::decode_header(&all).ok()),
            h => h.ok(),
        };
        let (Some(h), Ok(meta)) = (header, file.metadata()) else {
            continue;
        };
        let at = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        found.push((at, h.key, h.data_len));
    }
    found.sort_by_key(|f| std::cmp::Reverse(f.0));
    found
}

impl Node {
    /// The blocks of `bucket` this node holds (RAM first, then disk, newest
    /// first) and owns, each with its runner-up.
    pub async fn handback_list(&self, bucket: &str) -> Result<Vec<Handed>, HandbackError> {
        let peers = self.source.peers.as_ref().ok_or(HandbackError::NoCluster)?;
        let mut keys: Vec<(BlockKey, u64)> = self
            .tiers
            .ram_held()
            .into_iter()
            .map(|(k, b)| (k, b.len() as u64))
            .collect();
        if let Some(dir) = self.disk_dir.clone() {
            let disk = tokio::task::spawn_blocking(move || on_disk(&dir))
                .await
                .unwrap_or_default();
            keys.extend(disk.into_iter().map(|(_, k, len)| (k, len)));
        }
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for (key, len) in keys {
            if *key.bucket != *bucket || !seen.insert(key.clone()) {
                continue;
            }
            let Some(to) =
                peers
                    .reader
                    .runner_up(&key.bucket, &key.key, key.start(), &peers.self_id)
            else {
                // Not this node's: its owner holds it, or fetches it.
                continue;
            };
            let size = self
                .versions
                .known(&key.bucket, &key.key, &key.etag)
                .map(|m| m.size);
            out.push(Handed { key, size, len, to });
        }
        Ok(out)
    }

    /// Parses a hand-back body: one [`Handed`] JSON line per block.
    pub fn handback_lines(bucket: &str, body: &[u8]) -> Result<Vec<Handed>, HandbackError> {
        String::from_utf8_lossy(body)
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(n, l)| {
                serde_json::from_str::<Value>(l)
                    .ok()
                    .and_then(|v| Handed::from_json(bucket, &v))
                    .ok_or_else(|| HandbackError::BadLine(n + 1, l.chars().take(80).collect()))
            })
            .collect()
    }

    /// Takes `blocks` from the leaving node `from` (a member of this node's
    /// cluster): each one not held here is asked of it with only-if-cached
    /// and kept in both tiers.
    pub async fn take_from(
        self: &Arc<Self>,
        from: &str,
        blocks: Vec<Handed>,
    ) -> Result<Taken, HandbackError> {
        let peers = self.source.peers.as_ref().ok_or(HandbackError::NoCluster)?;
        let members = peers.reader.router().membership().current();
        if !members.nodes().iter().any(|n| n.id == from) || from == peers.self_id {
            return Err(HandbackError::NotMember(from.to_owned()));
        }
        let mut taken = Taken::default();
        for h in blocks {
            if self.tiers.cached(&h.key).await {
                taken.held += 1;
                continue;
            }
            let me = self.clone();
            let (bk, from, size) = (h.key.clone(), from.to_owned(), h.size);
            let block = self.tiers.open(
                h.key.clone(),
                false,
                true,
                h.len as usize,
                move |mut into| async move {
                    let peers = me.source.peers.as_ref().ok_or(NodeError::NotCached)?;
                    let learn = |meta: &shoal::store::ObjectMeta| {
                        me.versions.remember(&bk.bucket, &bk.key, meta)
                    };
                    peers
                        .fill_from(
                            std::slice::from_ref(&from),
                            // The block's owner once the leaving node is
                            // gone takes it from its previous owner.
                            super::PeerRole::RunnerUp,
                            TAKE_TIMEOUT,
                            (&bk, size),
                            &mut into,
                            (&learn, &me.metrics),
                        )
                        .await
                        .map(drop)
                        .ok_or(NodeError::NotCached)
                },
            );
            match block.await.whole().await {
                Ok((b, shoal::blocks::Served::Fetched)) => {
                    taken.taken += 1;
                    taken.bytes += b.len() as u64;
                }
                Ok(_) => taken.held += 1,
                Err(_) => taken.missed += 1,
            }
        }
        Ok(taken)
    }
}
