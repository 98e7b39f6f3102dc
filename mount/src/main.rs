//! `shoal-mount`: mount an S3 bucket read-only, reading through the shoal cluster.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use clap::Parser;
use shoal::config::units::{Dur, Size};
use shoal::config::{Config, Overrides, ProcessEnv};
use shoal_mount::MountSpec;

// The static build's allocator (see mount/Cargo.toml); glibc's stays elsewhere,
// with its arenas capped by shoal::heap.
#[cfg(all(target_env = "musl", feature = "mimalloc"))]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod mount_options;

/// Mount BUCKET[/PREFIX] read-only at MOUNTPOINT; reads go through the shoal cache
/// cluster named in the config ([cluster]), or straight to S3 without one.
///
/// Runs in the background by default and returns once the mount is live (or prints
/// why it could not mount and exits non-zero). SIGINT or SIGTERM unmounts cleanly.
/// As a mount helper: `mount -t fuse.shoal BUCKET /mnt -o config=/etc/shoal/mount.toml`.
///
/// A mount outlives the process serving it: a small keeper process holds the
/// kernel connection and restarts the server if it dies, with the same inodes and
/// open files. SIGHUP to the keeper, or `shoal-mount --restart MOUNTPOINT`, hands
/// the mount over to a fresh server (the binary now installed) without failing a
/// call.
///
/// Origin credentials: the keys in [origin.credentials], or without them the AWS
/// credential chain (environment, shared config and credentials files, web
/// identity, container credentials, EC2 instance metadata), refreshed as they
/// expire. The region: origin.region, --region, AWS_REGION, AWS_DEFAULT_REGION, the
/// profile's, then instance metadata on AWS's own endpoints.
#[derive(Parser, Debug)]
#[command(version, about, long_about)]
struct Args {
    /// BUCKET[/PREFIX] to mount (default: mount.source in the config).
    source: Option<String>,
    /// Directory to mount on: must exist and be empty (default: mount.mountpoint).
    mountpoint: Option<PathBuf>,
    /// The TOML config ([origin], [cluster], [cache], [mount]).
    #[arg(long, short, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Stay in the foreground instead of returning once mounted.
    #[arg(long, short)]
    foreground: bool,
    /// Let users other than the mounting one read the files.
    #[arg(long)]
    allow_other: bool,
    /// Owner of every file (default: the mounting user).
    #[arg(long)]
    uid: Option<u32>,
    /// Group of every file (default: the mounting user's group).
    #[arg(long)]
    gid: Option<u32>,
    /// Permission bits of files, octal (default 0444).
    #[arg(long, value_name = "MODE")]
    file_mode: Option<String>,
    /// Permission bits of directories, octal (default 0555).
    #[arg(long, value_name = "MODE")]
    dir_mode: Option<String>,
    /// How long listings and attributes are trusted, like "10s" (default 10s);
    /// also how old a listing the cluster may answer with.
    #[arg(long, value_name = "DURATION")]
    metadata_ttl: Option<String>,
    /// Where listings and HEADs go: "cluster" (their owner nodes, which cache
    /// and share them between mounts; the origin when no node answers) or
    /// "origin" (each mount asks the origin itself). Default: cluster.
    #[arg(long, value_name = "WHERE", value_parser = ["cluster", "origin"])]
    metadata: Option<String>,
    /// Client RAM tier for blocks, like "512MiB".
    #[arg(long, value_name = "SIZE")]
    cache_size: Option<String>,
    /// Hold the mount to this much memory, like "1GiB": its RAM tier, blocks in
    /// flight, read window and the replies it makes at once are made to fit
    /// (never above what they are set to), so it lives under a cgroup's
    /// MemoryMax= of that size; reads past that wait. At least 160MiB.
    #[arg(long, value_name = "SIZE")]
    memory_limit: Option<String>,
    /// Cluster blocks in flight per sequential reader, 1 to 1024 (default: the
    /// config's cluster.read_window, else 8).
    #[arg(long, value_name = "BLOCKS")]
    read_window: Option<usize>,
    /// Entries fetched ahead when a directory's entries are visited in listing
    /// order (cp -r, tar, cat dir/*, find): a file's first block, a directory's
    /// listing; 0 turns it off (default 32).
    #[arg(long, value_name = "FILES")]
    prefetch_files: Option<usize>,
    /// The mount's own disk tier: keep blocks read in this directory (files held
    /// there whole are read by the kernel directly).
    #[arg(long, value_name = "DIR")]
    disk_cache: Option<PathBuf>,
    /// Bound of the disk tier, like "10GiB" (with --disk-cache or mount.disk_cache).
    #[arg(long, value_name = "SIZE")]
    disk_cache_size: Option<String>,
    /// The zone this reader is in: it routes only to nodes of its zone (with a
    /// [cluster]; nothing without one).
    #[arg(long, value_name = "ZONE")]
    zone: Option<String>,
    /// Serve Prometheus metrics on this address, like 127.0.0.1:9180.
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<SocketAddr>,
    /// S3 endpoint, when the config has no [origin] section.
    #[arg(long, value_name = "URL")]
    endpoint: Option<String>,
    /// S3 region, when the config has no [origin] section.
    #[arg(long)]
    region: Option<String>,
    /// In the background, write logs here (default: discarded once mounted; use
    /// --foreground to watch them).
    #[arg(long, value_name = "FILE")]
    log_file: Option<PathBuf>,
    /// Set environment variables from FILE (NAME=VALUE lines) first: the
    /// variables a config's *_env keys name, kept off command lines. Only its
    /// owner may read the file.
    #[arg(long, value_name = "FILE")]
    env_file: Option<PathBuf>,
    /// Hand the mount on MOUNTPOINT over to a fresh server process (after an
    /// upgrade, say): reads in flight finish, open files keep reading.
    #[arg(long, value_name = "MOUNTPOINT", conflicts_with_all = ["source", "status"])]
    restart: Option<PathBuf>,
    /// Print the state of the mount on MOUNTPOINT (its keeper and server
    /// processes, restarts and handovers) as JSON.
    #[arg(long, value_name = "MOUNTPOINT", conflicts_with = "source")]
    status: Option<PathBuf>,
    /// The keeper's control socket (default: one per mountpoint under
    /// /run/shoal-mount, $XDG_RUNTIME_DIR/shoal-mount or /tmp/shoal-mount-UID).
    #[arg(long, value_name = "PATH")]
    control_socket: Option<PathBuf>,
    /// Serve a mount for its keeper (started by the keeper itself).
    #[arg(long, hide = true)]
    serve: bool,
    /// Mount options, comma-separated (fstab style): ro, allow_other, uid=N, gid=N,
    /// file_mode=M, dir_mode=M, metadata_ttl=D, metadata=cluster|origin, cache_size=S, memory_limit=S, read_window=N, prefetch_files=N,
    /// disk_cache=DIR, disk_cache_size=S, zone=Z, config=FILE, foreground; _netdev, nofail,
    /// noauto, defaults and the like are ignored.
    #[arg(short = 'o', value_name = "OPTIONS")]
    options: Vec<String>,
}

fn mode(s: &str, what: &str) -> Result<u16, String> {
    u16::from_str_radix(s.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("--{what} {s:?} is not an octal mode like 0444"))
}

fn spec(mut args: Args) -> Result<(MountSpec, bool), String> {
    mount_options::apply(&mut args)?;
    // Flags go into the config before it is checked, so they meet the file's bounds.
    let over = Overrides {
        ram_size: args
            .cache_size
            .as_deref()
            .map(Size::parse)
            .transpose()
            .map_err(|e| format!("--cache-size: {e}"))?,
        read_window: args.read_window,
        metadata_ttl: args
            .metadata_ttl
            .as_deref()
            .map(Dur::parse)
            .transpose()
            .map_err(|e| format!("--metadata-ttl: {e}"))?,
        prefetch_files: args.prefetch_files,
        metadata: args.metadata.clone(),
        disk_cache: args.disk_cache.clone(),
        disk_cache_size: args
            .disk_cache_size
            .as_deref()
            .map(Size::parse)
            .transpose()
            .map_err(|e| format!("--disk-cache-size: {e}"))?,
        zone: args.zone.clone(),
        endpoint: args.endpoint.clone(),
        region: args.region.clone(),
        origin_if_missing: true,
        ..Default::default()
    };
    let config = match &args.config {
        Some(p) => Config::load_with(p, &over),
        None => Config::parse_with("", "<defaults>", &ProcessEnv, &over),
    }
    .map_err(|e| e.to_string())?;
    let m = config.mount.clone();
    let source = args
        .source
        .clone()
        .or(m.source.clone())
        .ok_or("no BUCKET[/PREFIX] given (argument, or mount.source in the config)")?;
    let (bucket, prefix) = shoal_mount::parse_source(&source)?;
    let mountpoint = args
        .mountpoint
        .clone()
        .or(m.mountpoint.clone())
        .ok_or("no MOUNTPOINT given (argument, or mount.mountpoint in the config)")?;
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let spec = MountSpec {
        bucket,
        prefix,
        mountpoint,
        allow_other: args.allow_other || m.allow_other,
        uid: args.uid.or(m.uid).unwrap_or(uid),
        gid: args.gid.or(m.gid).unwrap_or(gid),
        file_mode: match &args.file_mode {
            Some(s) => mode(s, "file-mode")?,
            None => m.file_mode as u16,
        },
        dir_mode: match &args.dir_mode {
            Some(s) => mode(s, "dir-mode")?,
            None => m.dir_mode as u16,
        },
        metadata_ttl: m.metadata_ttl,
        negative_ttl: m.negative_ttl,
        prefetch_files: m.prefetch_files,
        cache_size: config.cache.ram_size,
        memory_limit: args
            .memory_limit
            .as_deref()
            .map(Size::parse)
            .transpose()
            .map_err(|e| format!("--memory-limit: {e}"))?
            .map(|s| s.0),
        metrics_addr: args.metrics_addr.or(config.metrics_listen),
        config,
    };
    // A limit too small for the blocks is an error now, not at the first read.
    spec.reader_budgets()?;
    Ok((spec, args.foreground))
}

const READY_ENV: &str = "SHOAL_MOUNT_NOTIFY_READY";
const READY_LINE: &str = "shoal-mount: ready";

/// Runs this program again in the foreground, detached, and waits until it says
/// the mount is live or exits.
fn daemonize() -> ExitCode {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("shoal-mount"));
    let mut cmd = std::process::Command::new(exe);
    cmd.args(std::env::args_os().skip(1))
        .arg("--foreground")
        .env(READY_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    // A session of its own: the mount outlives whatever started it (a shell, a
    // CSI driver whose whole process group is killed on restart).
    // SAFETY: setsid is async-signal-safe, as pre_exec requires.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("shoal-mount: cannot start the mount process: {e}");
            return ExitCode::from(1);
        }
    };
    let out = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    let _ = BufReader::new(out).read_line(&mut line);
    if line.trim() == READY_LINE {
        return ExitCode::SUCCESS;
    }
    // The child said why on stderr (shared with ours) and exited.
    let code = child.wait().ok().and_then(|s| s.code()).unwrap_or(1);
    ExitCode::from(if code == 0 { 1 } else { code as u8 })
}

fn main() -> ExitCode {
    shoal::heap::fewer_arenas();
    let args = Args::parse();
    // Before any thread starts, and before the log reads RUST_LOG.
    if let Some(f) = &args.env_file {
        if let Err(e) = shoal_mount::env_file::load(f) {
            eprintln!("shoal-mount: {e}");
            return ExitCode::from(2);
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        // Colours for a terminal only: under systemd stderr is the journal, which
        // would keep the escapes in every line.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    let log_file = args.log_file.clone();
    for (verb, mnt) in [("restart", &args.restart), ("status", &args.status)] {
        if let Some(mnt) = mnt {
            return ask_keeper(verb, mnt, args.control_socket.as_deref());
        }
    }
    let (serve, control_socket) = (args.serve, args.control_socket.clone());
    let (spec, foreground) = match spec(args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("shoal-mount: {e}");
            return ExitCode::from(2);
        }
    };
    if !foreground && !serve {
        return daemonize();
    }
    let notify = std::env::var_os(READY_ENV).is_some();
    let server_log = log_file.clone();
    let ready = move || {
        if notify {
            let mut out = std::io::stdout();
            let _ = writeln!(out, "{READY_LINE}");
            let _ = out.flush();
            // Detach from whoever started us: nobody reads our stdout any more, and
            // holding their stderr open would keep a pipe reader waiting forever.
            let null = std::fs::OpenOptions::new().write(true).open("/dev/null");
            let log = log_file.as_ref().map(|p| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
            });
            use std::os::fd::AsRawFd;
            if let Ok(null) = &null {
                // SAFETY: both descriptors are valid; dup2 replaces stdout.
                unsafe { libc::dup2(null.as_raw_fd(), 1) };
            }
            let err_target = match &log {
                Some(Ok(f)) => Some(f.as_raw_fd()),
                _ => null.as_ref().ok().map(|f| f.as_raw_fd()),
            };
            if let Some(fd) = err_target {
                // SAFETY: both descriptors are valid; dup2 replaces stderr.
                unsafe { libc::dup2(fd, 2) };
            }
        }
    };
    let _ = shoal::fd_limit::raise();
    if serve {
        return match link_fd().and_then(|link| shoal_mount::server::run(spec, link)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                if !e.is_empty() {
                    eprintln!("shoal-mount: {e}");
                }
                ExitCode::from(1)
            }
        };
    }
    match keep(spec, control_socket, (notify, server_log), ready) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shoal-mount: {e}");
            std::thread::sleep(Duration::from_millis(10));
            ExitCode::from(1)
        }
    }
}

/// The control socket of the mount on `mnt`.
fn control_path(mnt: &std::path::Path, named: Option<&std::path::Path>) -> Result<PathBuf, String> {
    if let Some(p) = named {
        return Ok(p.to_owned());
    }
    let canon = std::fs::canonicalize(mnt).map_err(|e| format!("{}: {e}", mnt.display()))?;
    Ok(shoal_mount::keeper::default_control_socket(&canon))
}

/// `--restart` and `--status`: one question to the mount's keeper.
fn ask_keeper(verb: &str, mnt: &std::path::Path, named: Option<&std::path::Path>) -> ExitCode {
    match control_path(mnt, named).and_then(|p| shoal_mount::keeper::ask(&p, verb)) {
        Ok(answer) => {
            println!("{answer}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("shoal-mount: {e}");
            ExitCode::from(1)
        }
    }
}

/// This process's end of the link to its keeper.
fn link_fd() -> Result<shoal_mount::link::Link, String> {
    use std::os::fd::FromRawFd;
    let fd: i32 = std::env::var(shoal_mount::keeper::LINK_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or("--serve is for the keeper to start a server with; run shoal-mount without it")?;
    // SAFETY: the keeper left this descriptor open for us.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: setting FD_CLOEXEC on a descriptor we own.
    unsafe {
        libc::fcntl(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            libc::F_SETFD,
            libc::FD_CLOEXEC,
        )
    };
    Ok(shoal_mount::link::Link::from_fd(fd))
}

/// The keeper: mounts (or adopts a live connection), runs servers, unmounts.
fn keep(
    spec: MountSpec,
    control: Option<PathBuf>,
    (background, log_file): (bool, Option<PathBuf>),
    ready: impl FnOnce(),
) -> Result<(), String> {
    let adopting = std::env::var_os(shoal_mount::keeper::ADOPT_ENV).is_some();
    let mountpoint = if adopting {
        std::fs::canonicalize(&spec.mountpoint)
            .map_err(|e| format!("mountpoint {}: {e}", spec.mountpoint.display()))?
    } else {
        shoal_mount::check_mountpoint(&spec.mountpoint)?
    };
    let control = match control {
        Some(c) => c,
        None => shoal_mount::keeper::default_control_socket(&mountpoint),
    };
    let launch = shoal_mount::keeper::Launch {
        exe: std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?,
        args: std::env::args_os().skip(1).collect(),
        log: background.then_some(match log_file {
            Some(p) => shoal_mount::keeper::Log::File(p),
            None => shoal_mount::keeper::Log::Discard,
        }),
    };
    let opts = shoal_mount::kernel::mount::MountOptions {
        fsname: format!("shoal:{}/{}", spec.bucket, spec.prefix),
        subtype: "shoal".into(),
        allow_other: spec.allow_other,
    };
    let keeper =
        shoal_mount::keeper::Keeper::start(mountpoint.clone(), &opts, launch, control, || {
            tracing::info!(
                "mounted s3://{}/{} on {}",
                spec.bucket,
                spec.prefix,
                mountpoint.display()
            );
            ready();
            shoal::notify::ready();
        })?;
    keeper.run()
}
