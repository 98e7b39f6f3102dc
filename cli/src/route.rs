//! `shoal route`: where a block goes, and why.

use std::process::ExitCode;

use shoal::config::{Config, Membership};
use shoal::route::placement::{node_hash, score, weighted_key};
use shoal::route::{BlockId, NodeSet};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// s3://BUCKET/KEY
    url: String,
    /// A byte offset in the object (the block is offset / cluster.block_size).
    #[arg(long, conflicts_with = "block")]
    offset: Option<u64>,
    /// A block index.
    #[arg(long)]
    block: Option<u64>,
}

pub fn run(cfg: &Config, a: Args) -> Result<ExitCode, String> {
    let (bucket, key) = super::parse_url(&a.url)?;
    let cluster = cfg.cluster().ok_or("the config has no [cluster] section")?;
    let Membership::Static(nodes) = &cluster.membership else {
        return Err(
            "route needs a static node list (a DNS or Kubernetes cluster changes as it is watched)"
                .into(),
        );
    };
    let set = NodeSet::new(
        nodes
            .iter()
            .filter(|n| cluster.zone.is_none() || n.zone == cluster.zone)
            .map(|n| (n.id.clone(), n.weight)),
    );
    let index = a
        .block
        .unwrap_or(a.offset.unwrap_or(0) / cluster.block_size);
    let block = BlockId {
        bucket: &bucket,
        key: &key,
        index,
    };
    let bh = block.hash();
    println!(
        "s3://{bucket}/{key} block {index} (bytes {}..{}, block_size {}), block hash {bh:016x}",
        index * cluster.block_size,
        (index + 1) * cluster.block_size,
        cluster.block_size
    );
    println!(
        "{:<6} {:<40} {:>8} {:>18} {:>14}",
        "rank", "node", "weight", "score", "weighted key"
    );
    for (rank, i) in set.rank(&block).into_iter().enumerate() {
        let n = &set.nodes()[i];
        let s = score(node_hash(&n.id), bh);
        let role = match rank {
            0 => "owner",
            1 => "failover, hedge",
            _ => "",
        };
        let wk = if set.is_weighted() {
            format!("{:.6}", weighted_key(n.weight, s))
        } else {
            "-".into()
        };
        println!(
            "{:<6} {:<40} {:>8} {s:>18x} {wk:>14}  {role}",
            rank + 1,
            n.id,
            n.weight
        );
    }
    Ok(ExitCode::SUCCESS)
}
