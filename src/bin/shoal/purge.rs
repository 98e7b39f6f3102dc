//! `shoal purge`: drop cached data on every node, reporting per node.

use std::process::ExitCode;

use shoal::config::{Addressing, Config, RetryPolicy};
use shoal::route::Membership;
use shoal::s3::{Purge, S3Client, S3ClientOptions};

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
    let cluster = cfg.cluster().ok_or("the config has no [cluster] section")?;
    let membership = Membership::from_config(cluster);
    membership
        .refresh()
        .await
        .map_err(|e| format!("cannot resolve the cluster's DNS name: {e}"))?;
    let scheme = if cluster.tls { "https" } else { "http" };
    let mut failed = 0;
    for n in membership.current().nodes() {
        let client = S3Client::new(S3ClientOptions {
            endpoint: url::Url::parse(&format!("{scheme}://{}", n.id))
                .map_err(|e| e.to_string())?,
            region: cfg
                .origin()
                .map(|o| o.region.clone())
                .unwrap_or_else(|_| "us-east-1".into()),
            addressing: Addressing::Path,
            credentials: cluster.credentials.clone(),
            timeouts: cluster.timeouts,
            retry: RetryPolicy {
                max_attempts: 2,
                base: std::time::Duration::from_millis(50),
                max: std::time::Duration::from_millis(200),
            },
            sign_range: false,
            pool_idle_per_host: 1,
        })
        .map_err(|e| e.to_string())?;
        let target = if as_prefix {
            Purge::Prefix(&key)
        } else {
            Purge::Key(&key)
        };
        // This command reaches every node itself: none needs to pass it on.
        match client.purge(&bucket, target, true).await {
            Ok(answer) => {
                let blocks = serde_json::from_str::<serde_json::Value>(&answer)
                    .ok()
                    .and_then(|v| v["purged_blocks"].as_u64())
                    .map_or("?".into(), |b| b.to_string());
                println!("{:<28} ok      {blocks} blocks dropped", n.id);
            }
            Err(e) => {
                failed += 1;
                println!("{:<28} FAILED  {e}", n.id);
            }
        }
    }
    Ok(if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
