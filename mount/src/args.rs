//! `shoal-mount`'s command line: its flags, and the `-o` options of a mount
//! helper applied onto them.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

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
// `--version` says the build too (`0.1.0+DIGEST`, [`shoal_mount::build`]): a CSI
// driver compares it with the build each mount's keeper says its server runs.
#[command(version, long_version = shoal_mount::build::this(), about, long_about)]
pub(crate) struct Args {
    /// BUCKET[/PREFIX] to mount (default: mount.source in the config).
    pub(crate) source: Option<String>,
    /// Directory to mount on: must exist and be empty (default: mount.mountpoint).
    pub(crate) mountpoint: Option<PathBuf>,
    /// The TOML config ([origin], [cluster], [cache], [mount]).
    #[arg(long, short, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Stay in the foreground instead of returning once mounted.
    #[arg(long, short)]
    pub(crate) foreground: bool,
    /// Let users other than the mounting one read the files.
    #[arg(long)]
    pub(crate) allow_other: bool,
    /// Owner of every file (default: the mounting user).
    #[arg(long)]
    pub(crate) uid: Option<u32>,
    /// Group of every file (default: the mounting user's group).
    #[arg(long)]
    pub(crate) gid: Option<u32>,
    /// Permission bits of files, octal (default 0444).
    #[arg(long, value_name = "MODE")]
    pub(crate) file_mode: Option<String>,
    /// Permission bits of directories, octal (default 0555).
    #[arg(long, value_name = "MODE")]
    pub(crate) dir_mode: Option<String>,
    /// How long listings and attributes are trusted, like "10s" (default 10s);
    /// also how old a listing the cluster may answer with.
    #[arg(long, value_name = "DURATION")]
    pub(crate) metadata_ttl: Option<String>,
    /// Where listings and HEADs go: "cluster" (their owner nodes, which cache
    /// and share them between mounts; the origin when no node answers) or
    /// "origin" (each mount asks the origin itself). Default: cluster.
    #[arg(long, value_name = "WHERE", value_parser = ["cluster", "origin"])]
    pub(crate) metadata: Option<String>,
    /// Client RAM tier for blocks, like "512MiB".
    #[arg(long, value_name = "SIZE")]
    pub(crate) cache_size: Option<String>,
    /// Hold the mount to this much memory, like "1GiB": its RAM tier, blocks in
    /// flight, read window and the replies it makes at once are made to fit
    /// (never above what they are set to), so it lives under a cgroup's
    /// MemoryMax= of that size; reads past that wait. At least 160MiB.
    #[arg(long, value_name = "SIZE")]
    pub(crate) memory_limit: Option<String>,
    /// Cluster blocks in flight per sequential reader, 1 to 1024 (default: the
    /// config's cluster.read_window, else 8).
    #[arg(long, value_name = "BLOCKS")]
    pub(crate) read_window: Option<usize>,
    /// Entries fetched ahead when a directory's entries are visited in listing
    /// order (cp -r, tar, cat dir/*, find): a file's first block, a directory's
    /// listing; 0 turns it off (default 32).
    #[arg(long, value_name = "FILES")]
    pub(crate) prefetch_files: Option<usize>,
    /// The mount's own disk tier: keep blocks read in this directory (files held
    /// there whole are read by the kernel directly).
    #[arg(long, value_name = "DIR")]
    pub(crate) disk_cache: Option<PathBuf>,
    /// Bound of the disk tier, like "10GiB" (with --disk-cache or mount.disk_cache).
    #[arg(long, value_name = "SIZE")]
    pub(crate) disk_cache_size: Option<String>,
    /// The zone this reader is in: it routes only to nodes of its zone (with a
    /// [cluster]; nothing without one).
    #[arg(long, value_name = "ZONE")]
    pub(crate) zone: Option<String>,
    /// Serve Prometheus metrics on this address, like 127.0.0.1:9180.
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_addr: Option<SocketAddr>,
    /// Serve Prometheus metrics on this Unix socket too (a CSI driver gathers
    /// its mounts' metrics there).
    #[arg(long, value_name = "PATH")]
    pub(crate) metrics_socket: Option<PathBuf>,
    /// S3 endpoint, when the config has no [origin] section.
    #[arg(long, value_name = "URL")]
    pub(crate) endpoint: Option<String>,
    /// S3 region, when the config has no [origin] section.
    #[arg(long)]
    pub(crate) region: Option<String>,
    /// In the background, write logs here (default: discarded once mounted; use
    /// --foreground to watch them).
    #[arg(long, value_name = "FILE")]
    pub(crate) log_file: Option<PathBuf>,
    /// Also write the log of the mount's start to FILE, started afresh: the
    /// keeper's until the mount is live, each server's until it serves, and why
    /// a start failed (what a supervisor with no access to the log shows).
    #[arg(long, value_name = "FILE")]
    pub(crate) start_log: Option<PathBuf>,
    /// Join group GID alone (that of this mount's token files, a CSI driver's
    /// unit) and give up changing groups again (needs CAP_SETGID and
    /// CAP_SETPCAP, then dropped).
    #[arg(long, value_name = "GID")]
    pub(crate) token_group: Option<u32>,
    /// Set environment variables from FILE (NAME=VALUE lines) first: the
    /// variables a config's *_env keys name, kept off command lines. Only its
    /// owner may read the file.
    #[arg(long, value_name = "FILE")]
    pub(crate) env_file: Option<PathBuf>,
    /// Hand the mount on MOUNTPOINT over to a fresh server process (after an
    /// upgrade, say): reads in flight finish, open files keep reading.
    #[arg(long, value_name = "MOUNTPOINT", conflicts_with_all = ["source", "status"])]
    pub(crate) restart: Option<PathBuf>,
    /// Print the state of the mount on MOUNTPOINT (its keeper and server
    /// processes, restarts and handovers) as JSON.
    #[arg(long, value_name = "MOUNTPOINT", conflicts_with = "source")]
    pub(crate) status: Option<PathBuf>,
    /// The keeper's control socket (default: one per mountpoint under
    /// /run/shoal-mount, $XDG_RUNTIME_DIR/shoal-mount or /tmp/shoal-mount-UID).
    #[arg(long, value_name = "PATH")]
    pub(crate) control_socket: Option<PathBuf>,
    /// Serve a mount for its keeper (started by the keeper itself).
    #[arg(long, hide = true)]
    pub(crate) serve: bool,
    /// Mount options, comma-separated (fstab style): ro, allow_other, uid=N, gid=N,
    /// file_mode=M, dir_mode=M, metadata_ttl=D, metadata=cluster|origin, cache_size=S, memory_limit=S, read_window=N, prefetch_files=N,
    /// disk_cache=DIR, disk_cache_size=S, zone=Z, config=FILE, foreground; _netdev, nofail,
    /// noauto, defaults and the like are ignored.
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub(crate) options: Vec<String>,
}

/// Applies `-o` options onto the flags (flags given explicitly still win).
pub(crate) fn apply_o(args: &mut Args) -> Result<(), String> {
    let opts: Vec<String> = args
        .options
        .iter()
        .flat_map(|o| o.split(','))
        .map(str::to_owned)
        .collect();
    for o in opts {
        let (k, v) = match o.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim().to_owned())),
            None => (o.trim(), None),
        };
        let need = |v: Option<String>| v.ok_or_else(|| format!("-o {k} needs a value ({k}=...)"));
        match k {
            "" | "ro" | "_netdev" | "nofail" | "noauto" | "auto" | "defaults" | "user"
            | "nouser" | "users" | "exec" | "noexec" | "suid" | "nosuid" | "dev" | "nodev"
            | "atime" | "noatime" | "async" => {}
            // mount(8) may add rw on its own; the mount is read-only whatever it says.
            "rw" => eprintln!("shoal-mount: ignoring -o rw: shoal mounts are read-only"),
            "allow_other" => args.allow_other = true,
            "foreground" => args.foreground = true,
            "uid" => {
                args.uid = args.uid.or(Some(
                    need(v)?.parse().map_err(|_| "-o uid= takes a number")?,
                ))
            }
            "gid" => {
                args.gid = args.gid.or(Some(
                    need(v)?.parse().map_err(|_| "-o gid= takes a number")?,
                ))
            }
            "file_mode" => args.file_mode = args.file_mode.take().or(Some(need(v)?)),
            "dir_mode" => args.dir_mode = args.dir_mode.take().or(Some(need(v)?)),
            "metadata_ttl" => args.metadata_ttl = args.metadata_ttl.take().or(Some(need(v)?)),
            "metadata" => args.metadata = args.metadata.take().or(Some(need(v)?)),
            "cache_size" => args.cache_size = args.cache_size.take().or(Some(need(v)?)),
            "memory_limit" => args.memory_limit = args.memory_limit.take().or(Some(need(v)?)),
            "read_window" => {
                args.read_window = args.read_window.or(Some(
                    need(v)?
                        .parse()
                        .map_err(|_| "-o read_window= takes a number")?,
                ))
            }
            "prefetch_files" => {
                args.prefetch_files = args.prefetch_files.or(Some(
                    need(v)?
                        .parse()
                        .map_err(|_| "-o prefetch_files= takes a number")?,
                ))
            }
            "config" => args.config = args.config.take().or(Some(PathBuf::from(need(v)?))),
            "disk_cache" => {
                args.disk_cache = args.disk_cache.take().or(Some(PathBuf::from(need(v)?)))
            }
            "disk_cache_size" => {
                args.disk_cache_size = args.disk_cache_size.take().or(Some(need(v)?))
            }
            "zone" => args.zone = args.zone.take().or(Some(need(v)?)),
            other => return Err(format!("unknown mount option {other:?}")),
        }
    }
    Ok(())
}

pub(crate) fn mode(s: &str, what: &str) -> Result<u16, String> {
    u16::from_str_radix(s.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("--{what} {s:?} is not an octal mode like 0444"))
}
