//! Restarts and upgrades with no gap: a new node process takes over the running
//! one's listening sockets and disk tier.
//!
//! SIGHUP (`systemctl reload`) makes the running node start its own binary again
//! (the path it was started from, so a package upgrade's new binary) with one end
//! of a socket pair; `shoal-node --upgrade` connects to the running node's control
//! socket instead. Either way, over that socket ([`link`]):
//!
//! 1. the successor says hello; the old node offers its listening sockets (the
//!    HTTP or TLS listener and the control socket, by `SCM_RIGHTS`) and its disk
//!    tier format;
//! 2. the successor checks it can read the tier ([`format`]) and that its config
//!    and credentials work, then asks to take over, or refuses (the old node goes
//!    on serving);
//! 3. the old node closes each connection after its next answer for a moment
//!    (`Connection: close`, so that no client sends a request on a connection
//!    as it closes), then stops accepting (connections queue in the listening
//!    socket, which stays open), answers what it took, writes its blocks to the
//!    disk, and says it has let go;
//! 4. the successor opens the disk tier (with every block the old one fetched),
//!    serves, and says so; the old node hands systemd its main PID and exits. A
//!    successor that dies before serving leaves the old node serving again.
//!
//! The mount's server handover (mount/src/keeper) is the same dance.

pub mod format;
mod giver;
pub mod link;
pub mod message;
mod taker;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

pub use giver::{serve, Ended, Restart};
pub use link::{Control, Link};
pub use message::{Malformed, Message};
pub use taker::{take, Taken};

/// The successor's end of the socket pair, by descriptor number.
pub const ENV_FD: &str = "SHOAL_NODE_HANDOVER_FD";

static DRAINING: AtomicBool = AtomicBool::new(false);

/// Whether this node is handing over: each answer closes its connection, so
/// clients take their next request to a fresh one (the successor's) instead of
/// sending it on a connection the drain is about to close.
pub fn draining() -> bool {
    DRAINING.load(Relaxed)
}

fn set_draining(on: bool) {
    DRAINING.store(on, Relaxed);
}

#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    #[error("handover: {0}")]
    Malformed(#[from] Malformed),
    #[error("--upgrade needs the running node's control socket: give --control, or a config with a disk tier (the socket is named for its data_dir)")]
    NoControl,
    #[error("cannot reach the running node at {}: {e}", path.display())]
    Connect { path: PathBuf, e: std::io::Error },
    #[error("{ENV_FD}={0} is not a descriptor number")]
    BadFd(String),
    #[error("handover: {0}")]
    Io(#[from] std::io::Error),
    #[error("handover: the running node said {0:?}")]
    Protocol(String),
    #[error("handover: the running node went away")]
    Gone,
    #[error("refusing to take over: {0}")]
    Refused(String),
    #[error("the new node process (pid {0}) refused to take over: {1}")]
    TheyRefused(u32, String),
}

/// How this process starts: on its own, or taking over from a running node.
pub enum Start {
    Fresh,
    Successor(Link),
}

/// A successor started by the old node (SIGHUP) has its link in [`ENV_FD`]; one
/// started by hand (`--upgrade`) connects to `control`.
pub fn start(upgrade: bool, control: Option<&Path>) -> Result<Start, HandoverError> {
    if let Some(v) = std::env::var_os(ENV_FD) {
        std::env::remove_var(ENV_FD);
        let v = v.to_string_lossy().into_owned();
        let fd: i32 = v.parse().map_err(|_| HandoverError::BadFd(v))?;
        // SAFETY: the old node left this descriptor open for this process alone.
        return Ok(Start::Successor(unsafe { Link::inherited(fd) }));
    }
    if !upgrade {
        return Ok(Start::Fresh);
    }
    let path = control.ok_or(HandoverError::NoControl)?;
    Link::connect(path)
        .map(Start::Successor)
        .map_err(|e| HandoverError::Connect {
            path: path.to_owned(),
            e,
        })
}

/// Where a node listens for `--upgrade` unless told: a name in the abstract
/// namespace (no file to leave in the data dir or go stale) made from its disk
/// tier's directory, the one thing two nodes must not share.
pub fn default_control(cfg: &shoal::config::Config) -> Option<PathBuf> {
    match (&cfg.cache.data_dir, cfg.cache.disk_size) {
        (Some(dir), n) if n > 0 => {
            let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
            let bytes = std::os::unix::ffi::OsStrExt::as_bytes(dir.as_os_str());
            Some(PathBuf::from(format!("@shoal-node/{:016x}", fnv1a(bytes))))
        }
        _ => None,
    }
}

/// FNV-1a: the same in every build, so another version finds the name.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The control socket of a node that starts on its own: one left behind by a
/// node that is gone is replaced; without it, SIGHUP still hands over.
pub fn listen_control(path: Option<&Path>) -> Option<Control> {
    let path = path?;
    match Control::bind(path) {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(
                "cannot listen on the control socket {}: {e}; `shoal-node --upgrade` cannot find this node (SIGHUP still hands over)",
                path.display()
            );
            None
        }
    }
}
