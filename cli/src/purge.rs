//! `shoal purge`: drop cached data on every node, reporting per node.

use std::process::ExitCode;

use shoal::config::{Config, RetryPolicy};
use shoal::node_proto::{self, Purge};
use shoal::store::s3::S3Client;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// s3://BUCKET/KEY, or s3://BUCKET/PREFIX/ (a trailing / means a prefix).
    url: String,
    /// Treat the key as a prefix even without a trailing /.
    #[arg(long)]
    prefix: bool,
}

pub async fn run(cfg: &Config, a: Args) -> Result<ExitCode, String> {
    let (bucket, key) = super::parse_url(&a.url)?;
    let as_prefix = a.prefix || key.is_empty() || key.ends_with('/');
    let (cluster, ids) = super::cluster_nodes(cfg).await?;
    let region = cfg
        .origin()
        .map(|o| o.region.clone())
        .unwrap_or_else(|_| "us-east-1".into());
    let mut failed = 0;
    for id in &ids {
        let mut opts = node_proto::node_options(cluster, &region, id, 1);
        // A purge is idempotent: worth a second try.
        opts.retry = RetryPolicy {
            max_attempts: 2,
            base: std::time::Duration::from_millis(50),
            max: std::time::Duration::from_millis(200),
        };
        let client = S3Client::new(opts).map_err(|e| e.to_string())?;
        let target = if as_prefix {
            Purge::Prefix(key.clone())
        } else {
            Purge::Key(key.clone())
        };
        // This command reaches every node itself: none needs to pass it on.
        match node_proto::purge::purge(&client, &bucket, &target, true).await {
            Ok(answer) => {
                let blocks = serde_json::from_str::<serde_json::Value>(&answer)
                    .ok()
                    .and_then(|v| v["purged_blocks"].as_u64())
                    .map_or("?".into(), |b| b.to_string());
                println!("{id:<28} ok      {blocks} blocks dropped");
            }
            Err(e) => {
                failed += 1;
                println!("{id:<28} FAILED  {e}");
            }
        }
    }
    Ok(if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
