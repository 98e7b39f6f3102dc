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
/// SIGHUP (systemctl reload) starts the node's binary again (the file it was
/// started from: after a package upgrade, the new version), which takes over the
/// listening socket and the disk tier with no gap; see --upgrade.
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
    /// Take over from the node running with this config, found by its control
    /// socket: its listening socket passes to this process (no connection is
    /// refused), it answers what it took and exits, and this process opens the
    /// disk tier after it. Refused, and the running node goes on, if this binary
    /// cannot read the disk tier's format or the config does not start. Under
    /// systemd, use `systemctl reload shoal-node` (SIGHUP) instead, so the new
    /// process stays in the service.
    #[arg(long)]
    upgrade: bool,
    /// The control socket --upgrade finds the running node by: a path, or @NAME
    /// in the abstract namespace [default: @shoal-node/HASH, named for
    /// cache.data_dir, with a disk tier; else none].
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
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
    // Before any thread: the successor's descriptor is read from the environment.
    let control = args
        .control
        .clone()
        .or_else(|| shoal_node::handover::default_control(&cfg));
    let start = match shoal_node::handover::start(args.upgrade, control.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("shoal-node: {e}");
            return ExitCode::from(2);
        }
    };
    let restart = shoal_node::handover::Restart::of_this_process();
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    match rt.block_on(run(cfg, start, control, restart)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shoal-node: {e}");
            ExitCode::from(1)
        }
    }
}

async fn run(
    mut cfg: Config,
    start: shoal_node::handover::Start,
    control: Option<PathBuf>,
    restart: shoal_node::handover::Restart,
) -> Result<(), String> {
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
    // A successor checks all it can before the running node lets the disk go.
    let taken = match start {
        shoal_node::handover::Start::Fresh => None,
        shoal_node::handover::Start::Successor(link) => {
            let origin = cfg.origin().map_err(|e| e.to_string())?;
            let creds = async {
                let client = origin.client().map_err(|e| e.to_string())?;
                client.check_credentials().await.map_err(|e| e.to_string())
            };
            let data_dir = cfg
                .cache
                .data_dir
                .clone()
                .filter(|_| cfg.cache.disk_size > 0);
            let t =
                shoal_node::handover::take(link, data_dir.as_deref(), control.as_deref(), creds)
                    .await
                    .map_err(|e| e.to_string())?;
            Some(t)
        }
    };
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
    let (listener, control) = match &taken {
        Some(t) => (
            tokio::net::TcpListener::from_std(t.listener.try_clone().map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?,
            t.control.as_ref().and_then(|c| c.try_clone().ok()),
        ),
        None => (
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| format!("cannot listen on {addr}: {e}"))?,
            shoal_node::handover::listen_control(control.as_deref()),
        ),
    };
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(
        "shoal-node {} listening on {}://{local}",
        env!("CARGO_PKG_VERSION"),
        if tls.is_some() { "https" } else { "http" }
    );
    match &taken {
        // The old node tells systemd this process is the service's main one.
        Some(t) => {
            tracing::info!("took over from pid {}", t.from);
            t.serving()
        }
        None => shoal::notify::ready(),
    }
    let ended = shoal_node::handover::serve(
        listener,
        control,
        app.clone(),
        tls,
        node_cfg.shutdown_timeout,
        node_cfg.stop_flush_timeout,
        restart,
    )
    .await;
    if ended == shoal_node::handover::Ended::Stopped {
        // The next start on this disk serves what this process held.
        app.node.keep_on_stop(node_cfg.stop_flush_timeout).await;
    }
    Ok(())
}
