//! `shoal-mount`: mount an S3 bucket read-only, reading through the shoal cluster.

use std::io::{BufRead, BufReader, Write};
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

mod args;
use args::{apply_o, mode, Args};

fn spec(mut args: Args) -> Result<(MountSpec, bool), String> {
    apply_o(&mut args)?;
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
        metrics: (args.metrics_addr.or(config.metrics_listen))
            .map(shoal_mount::metrics::Listen::Tcp)
            .into_iter()
            .chain(
                args.metrics_socket
                    .clone()
                    .map(shoal_mount::metrics::Listen::Unix),
            )
            .collect(),
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
    if let Some(p) = &args.start_log {
        // A keeper starts it afresh; the servers it starts (--serve) add to it.
        if let Err(e) = shoal_mount::start_log::open(p, !args.serve) {
            eprintln!("shoal-mount: --start-log {}: {e}", p.display());
            return ExitCode::from(2);
        }
    }
    if let Some(g) = args.token_group {
        if let Err(e) = shoal_mount::token_group::join(g) {
            return failed(2, &e);
        }
    }
    // Before any thread starts, and before the log reads RUST_LOG.
    if let Some(f) = &args.env_file {
        if let Err(e) = shoal_mount::env_file::load(f) {
            return failed(2, &e.to_string());
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        // Colours for a terminal only: under systemd stderr is the journal, which
        // would keep the escapes in every line.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(|| shoal_mount::start_log::Tee)
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
        Err(e) => return failed(2, &e),
    };
    if !foreground && !serve {
        return daemonize();
    }
    let notify = std::env::var_os(READY_ENV).is_some();
    let server_log = log_file.clone();
    let ready = move || {
        shoal_mount::start_log::done();
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
            Err(e) if e.is_empty() => ExitCode::from(1),
            Err(e) => failed(1, &e),
        };
    }
    match keep(spec, control_socket, (notify, server_log), ready) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = failed(1, &e);
            std::thread::sleep(Duration::from_millis(10));
            code
        }
    }
}

/// Says why this process fails, on standard error and in the start log.
fn failed(code: u8, why: &str) -> ExitCode {
    eprintln!("shoal-mount: {why}");
    shoal_mount::start_log::note(&format!("shoal-mount: {why}"));
    ExitCode::from(code)
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
