//! `shoal-node`: serve an S3 bucket's reads from RAM and disk tiers.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use shoal::config::{Config, Overrides};

/// An S3-compatible cache node: ranged GETs served from RAM, then local disk, then
/// the origin bucket (one origin fetch per block however many ask).
///
/// With a [cluster] section it is a gateway: misses of blocks it does not own go to
/// their owner nodes (mode = "strong", the default), and purges, overwrites and
/// deletes are passed on to every node. [gateway] writes = true forwards PUT,
/// multipart uploads and DELETE to the origin; [[rules]] decide what is cached.
///
/// Clients sign requests with a key from the config's [auth] section (SigV4 header
/// or presigned URL); a key's allow list says what it may do (a key without one
/// reads and lists only), its max_*_per_second how fast. GET /healthz answers
/// "ok"; GET /metrics is Prometheus text; POST /BUCKET?shoal-purge&prefix=P (or
/// &key=K), signed by a key granted purge, drops cached data. SIGTERM or SIGINT
/// stops accepting and drains open requests; SIGUSR1 reopens [node] access_log.
///
/// Origin credentials: the keys in [origin.credentials], or without them the AWS
/// credential chain (environment, shared config and credentials files, web
/// identity, container credentials, EC2 instance metadata), refreshed as they
/// expire; the node does not start without any.
#[derive(Parser, Debug)]
#[command(version, about, long_about)]
struct Args {
    /// The TOML config ([origin], [node], [cache], [auth]; optional [tls], [cluster],
    /// [gateway], [[rules]]).
    #[arg(long, short, value_name = "FILE")]
    config: PathBuf,
    /// Listen address, overriding node.listen.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Disk tier directory, overriding cache.data_dir.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    shoal::heap::fewer_arenas();
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        // Colours for a terminal only: under systemd stderr is the journal, which
        // would keep the escapes in every line.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    // Flags go into the config before it is checked, so they meet the file's rules.
    let over = Overrides {
        listen: args.listen,
        data_dir: args.data_dir.clone(),
        ..Default::default()
    };
    let cfg = match Config::load_with(&args.config, &over) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("shoal-node: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    match rt.block_on(run(cfg)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shoal-node: {e}");
            ExitCode::from(1)
        }
    }
}

async fn run(mut cfg: Config) -> Result<(), String> {
    shoal::settle_region(&mut cfg).await;
    let node_cfg = cfg.node().map_err(|e| e.to_string())?.clone();
    // A socket per connection, plus block files and origin connections.
    match shoal::fd_limit::raise() {
        Ok(n) if (n as usize) < node_cfg.max_connections + 256 => tracing::warn!(
            "open-file limit is {n}, below node.max_connections ({}) plus room for the disk and origin: connections past the limit fail to be accepted",
            node_cfg.max_connections
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot raise the open-file limit: {e}"),
    }
    let (app, tls) = shoal_node::build(&cfg, None)?;
    // No credentials is a reason not to start, said now rather than at the first
    // miss (the providers share one cache, so this is the node's fetch).
    let origin = cfg.origin().map_err(|e| e.to_string())?;
    origin
        .client()
        .map_err(|e| e.to_string())?
        .check_credentials()
        .await
        .map_err(|e| e.to_string())?;
    let addr = node_cfg.listen;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(
        "shoal-node {} listening on {}://{local}",
        env!("CARGO_PKG_VERSION"),
        if tls.is_some() { "https" } else { "http" }
    );
    shoal::notify::ready();
    let shutdown = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    shoal_node::serve(listener, app, tls, shutdown, node_cfg.shutdown_timeout).await;
    Ok(())
}
