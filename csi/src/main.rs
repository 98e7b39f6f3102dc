//! `shoal-csi`: the CSI node plugin. Serves CSI's Identity and Node services on a
//! Unix socket, as kubelet (through node-driver-registrar) expects.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use shoal_csi::kube::KubeApi;
use shoal_csi::launch::Launcher;
use shoal_csi::zone::{self, ZoneSource};
use shoal_csi::{Plugin, PluginConfig};

/// CSI node plugin for shoal (driver csi.shoal): S3 buckets as read-only volumes,
/// each mounted by a shoal-mount of its own and read through the shoal cluster.
///
/// A PersistentVolume names the bucket in volumeAttributes (bucket, and optionally
/// prefix, config, authenticationSource: pod, cache: emptyDir with cacheSize);
/// its mountOptions are shoal-mount's long options without dashes
/// (metadata-ttl=30s, uid=1000, allow-other, cache-size=512MiB, ...). Mounts
/// outlive this plugin: a restart takes back the volumes it published.
#[derive(Parser, Debug)]
#[command(version, about, long_about)]
struct Args {
    /// Where to serve CSI: unix:///PATH/csi.sock (or a plain path).
    #[arg(long, env = "CSI_ENDPOINT", required_unless_present = "install_mount")]
    endpoint: Option<String>,
    /// This node's id, as NodeGetInfo reports it (the Kubernetes node name).
    #[arg(long, env = "CSI_NODE_ID", required_unless_present = "install_mount")]
    node_id: Option<String>,
    /// Copy the shoal-mount beside this binary to DIR/shoal-mount (by a rename:
    /// mounts running the old one keep it) and exit: what the DaemonSet's init
    /// container runs, for the host's systemd. DIR is a host path the host lets
    /// systemd run binaries from (/opt/csi/shoal; Bottlerocket allows /opt/csi),
    /// and --mount-bin then names DIR/shoal-mount.
    #[arg(long, value_name = "DIR")]
    install_mount: Option<PathBuf>,
    /// This node's zone: reported as topology.kubernetes.io/zone, and the zone
    /// its mounts prefer the nodes of.
    #[arg(long, env = "CSI_ZONE")]
    zone: Option<String>,
    /// Read this node's zone from its topology.kubernetes.io/zone label (GET
    /// /api/v1/nodes/NODE_ID from the Kubernetes API) at start. If it cannot be
    /// read the plugin says why and runs with no zone.
    #[arg(long, conflicts_with = "zone")]
    zone_from_node: bool,
    /// Where published volumes' files are kept (configs, tokens, disk tiers, logs,
    /// control sockets); must outlive the plugin.
    #[arg(long, default_value = "/var/lib/kubelet/plugins/csi.shoal")]
    state_dir: PathBuf,
    /// The shoal-mount binary (default: beside this one, else on PATH).
    #[arg(long)]
    mount_bin: Option<PathBuf>,
    /// How mounts' keepers run: direct (processes of their own, outside the
    /// plugin) or systemd (transient units of the host's systemd, which outlive
    /// the plugin's container).
    #[arg(long, default_value = "direct", value_parser = Launcher::parse)]
    launcher: Launcher,
    /// The mount config of a volume that names no config attribute.
    #[arg(long, default_value = "/etc/shoal/mount.toml")]
    default_config: PathBuf,
    /// The Kubernetes API (for a pod's ServiceAccount role, and this node's zone
    /// with --zone-from-node); in a cluster, the API server of
    /// KUBERNETES_SERVICE_HOST with the pod's own token and CA.
    #[arg(long)]
    kube_api: Option<String>,
    #[arg(long, requires = "kube_api")]
    kube_token_file: Option<PathBuf>,
    #[arg(long, requires = "kube_api")]
    kube_ca_file: Option<PathBuf>,
    /// Serve Prometheus metrics on this address (like 0.0.0.0:9809): the
    /// plugin's own (volumes, mounts, shares, binds, launches, failed calls by
    /// reason, handovers, each mount's version) and every mount's, labelled
    /// with its volume and mount.
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// At start, hand every mount served by another shoal-mount than
    /// --mount-bin (the one a rollout just installed) over to it, one at a time,
    /// under its readers; a mount whose new server cannot start goes on with its
    /// old one.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    upgrade_mounts: bool,
    /// The first of the 65536 groups the volumes' tokens belong to: a mount's
    /// unit (--launcher systemd) is given its volume's group alone, and reads no
    /// other volume's token. Pick a range no user or group of the host uses.
    #[arg(long, default_value_t = 2_147_418_112, value_name = "GID")]
    token_group_base: u32,
    /// How often the mounts' copies of the driver's tokens are brought up to date.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration, hide = true)]
    token_refresh: std::time::Duration,
}

fn main() -> ExitCode {
    shoal::heap::fewer_arenas();
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        // Colours only for a terminal: under systemd (a unit, the DaemonSet's
        // container) every journal line would carry their escape codes.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shoal-csi: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(args: Args) -> Result<(), String> {
    if let Some(dir) = &args.install_mount {
        let from = shoal_csi::install::image_mount_bin().map_err(|e| e.to_string())?;
        let dest = shoal_csi::install::install(&from, dir).map_err(|e| e.to_string())?;
        tracing::info!("installed {} as {}", from.display(), dest.display());
        return Ok(());
    }
    // (Both required without --install-mount.)
    let (Some(endpoint), Some(node_id)) = (args.endpoint, args.node_id) else {
        return Err("--endpoint and --node-id are required".into());
    };
    let socket = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .unwrap_or(&endpoint);
    let socket = PathBuf::from(socket);
    if !socket.is_absolute() {
        return Err(format!(
            "--endpoint {endpoint}: not a Unix socket path (unix:///PATH/csi.sock)"
        ));
    }
    if node_id.trim().is_empty() {
        return Err("--node-id is empty".into());
    }
    let mount_bin = args.mount_bin.unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(|d| d.join("shoal-mount")))
            .filter(|p| p.exists())
            .unwrap_or_else(|| PathBuf::from("shoal-mount"))
    });
    let kube = match args.kube_api {
        Some(url) => KubeApi {
            url,
            token_file: args
                .kube_token_file
                .unwrap_or_else(|| KubeApi::in_cluster().token_file),
            ca_file: args.kube_ca_file,
        },
        None => KubeApi::in_cluster(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let source = match (args.zone_from_node, args.zone) {
        (true, _) => ZoneSource::FromNode,
        (false, Some(z)) => ZoneSource::Given(z),
        (false, None) => ZoneSource::None,
    };
    let zone = rt.block_on(zone::resolve(source, &kube, &node_id));
    let plugin = Plugin::start(PluginConfig {
        node_id,
        zone,
        state_dir: args.state_dir,
        mount_bin,
        launcher: args.launcher,
        default_config: args.default_config,
        kube,
        token_group_base: args.token_group_base,
        token_refresh: args.token_refresh,
        upgrade_mounts: args.upgrade_mounts,
    })?;
    rt.block_on(async {
        if let Some(dir) = socket.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        // A socket left by an earlier run.
        let _ = std::fs::remove_file(&socket);
        let listener = tokio::net::UnixListener::bind(&socket)
            .map_err(|e| format!("cannot listen on {}: {e}", socket.display()))?;
        tracing::info!("serving CSI on {}", socket.display());
        if let Some(addr) = args.metrics_addr {
            let at = shoal_csi::scrape::serve(addr, plugin.clone())
                .await
                .map_err(|e| format!("cannot serve metrics on {addr}: {e}"))?;
            tracing::info!("serving metrics on http://{at}/metrics");
        }
        let shutdown = async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            // The mounts go on: they are not this process's.
            tracing::info!("stopping; published volumes stay mounted");
        };
        shoal_csi::serve(plugin, listener, shutdown).await
    })
}
