//! `shoal`: see and steer a shoal cluster: warm a prefix, check nodes, explain
//! where a block goes, purge cached data.

mod drain;
mod purge;
mod route;
mod status;
mod warm;
mod warm_listings;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use shoal::config::{ClusterConfig, Config};
use shoal::route::Membership;

/// Operate a shoal cache cluster, with the same TOML config as shoal-mount
/// ([origin], [cluster]) and the usual AWS_* environment.
#[derive(Parser, Debug)]
#[command(name = "shoal", version, about, long_about)]
struct Cli {
    /// The TOML config (the [origin] and [cluster] sections are used).
    #[arg(long, short, global = true, value_name = "FILE", env = "SHOAL_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Fetch every block of every object under a prefix onto its owning node, so the
    /// cluster is hot before a job starts.
    Warm(warm::Args),
    /// Reachability, version, uptime, cache use and hit ratio of every node.
    /// Exits non-zero when a node is unreachable.
    Status(status::Args),
    /// Show the block an offset falls in and the node ranking for it.
    Route(route::Args),
    /// Drop cached data of one key (or a prefix) on every node.
    Purge(purge::Args),
    /// Hand a leaving node's blocks to the nodes that own them once it is gone
    /// (they take them from it, not from the origin), then say it can be removed.
    /// Exits non-zero when a batch failed or --timeout cut the hand-back short.
    Drain(drain::Args),
    /// Print shell completions.
    Completions {
        /// bash, zsh, fish, elvish or powershell
        shell: clap_complete::Shell,
    },
}

/// `s3://BUCKET/KEY` as (bucket, key).
pub fn parse_url(url: &str) -> Result<(String, String), String> {
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| format!("{url:?} is not an s3://BUCKET/KEY URL"))?;
    let (b, k) = rest.split_once('/').unwrap_or((rest, ""));
    if b.is_empty() {
        return Err(format!("{url:?} names no bucket"));
    }
    Ok((b.to_owned(), k.to_owned()))
}

/// The config's `[cluster]` and its nodes as they resolve now.
pub async fn cluster_nodes(cfg: &Config) -> Result<(&ClusterConfig, Vec<String>), String> {
    let cluster = cfg.cluster().ok_or("the config has no [cluster] section")?;
    let membership = Membership::from_config(cluster);
    membership
        .refresh()
        .await
        .map_err(|e| format!("cannot resolve the cluster's DNS name: {e}"))?;
    let ids = membership
        .current()
        .nodes()
        .iter()
        .map(|n| n.id.clone())
        .collect();
    Ok((cluster, ids))
}

fn load(path: &Option<PathBuf>) -> Result<Config, String> {
    match path {
        Some(p) => Config::load(p).map_err(|e| e.to_string()),
        None => Err("no config: give --config FILE (or SHOAL_CONFIG)".into()),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Command::Completions { shell } = &cli.command {
        clap_complete::generate(*shell, &mut Cli::command(), "shoal", &mut std::io::stdout());
        return ExitCode::SUCCESS;
    }
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let result = rt.block_on(async {
        let mut cfg = load(&cli.config)?;
        shoal::settle_region(&mut cfg).await;
        match cli.command {
            Command::Warm(a) => warm::run(&cfg, a).await,
            Command::Status(a) => status::run(&cfg, a).await,
            Command::Route(a) => route::run(&cfg, a),
            Command::Purge(a) => purge::run(&cfg, a).await,
            Command::Drain(a) => drain::run(&cfg, a).await,
            Command::Completions { .. } => unreachable!("handled above"),
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("shoal: {e}");
            ExitCode::from(2)
        }
    }
}
