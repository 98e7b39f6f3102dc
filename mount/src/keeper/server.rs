//! A server process: started with the keeper's own command line and `--serve`,
//! linked to the keeper by a socket pair whose messages become [`Event`]s.

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::mpsc::Sender;

use super::Event;
use crate::link::Link;

/// How a server is started: this program, with the arguments the keeper had.
pub struct Launch {
    pub exe: PathBuf,
    pub args: Vec<OsString>,
    /// Where servers log once the keeper runs in the background (`None`: where
    /// the keeper's own log goes now).
    pub log: Option<Log>,
}

/// A background mount's log.
pub enum Log {
    File(PathBuf),
    Discard,
}

/// The environment variable that hands a server its end of the link.
pub const LINK_ENV: &str = "SHOAL_MOUNT_LINK_FD";
/// A keeper given a live connection to adopt (`device,journal` descriptors).
pub const ADOPT_ENV: &str = "SHOAL_MOUNT_ADOPT_FDS";

pub(super) struct Server {
    pub id: u64,
    pub link: Link,
    pub child: Child,
    /// The digest of the executable it runs ([`crate::build`]), once asked.
    build: std::cell::OnceCell<Option<String>>,
}

impl Server {
    /// Starts server `id`; what it sends on its link arrives on `tx`.
    pub fn spawn(launch: &Launch, id: u64, tx: &Sender<Event>) -> Result<Server, String> {
        let (ours, theirs) = Link::pair().map_err(|e| e.to_string())?;
        let theirs = theirs.into_inheritable().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(&launch.exe);
        cmd.args(&launch.args)
            .arg("--serve")
            .env(LINK_ENV, theirs.as_raw_fd().to_string())
            .env_remove(ADOPT_ENV)
            .stdout(std::process::Stdio::null());
        match &launch.log {
            Some(Log::File(p)) => {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|e| format!("log file {}: {e}", p.display()))?;
                cmd.stderr(f);
            }
            Some(Log::Discard) => {
                cmd.stderr(std::process::Stdio::null());
            }
            None => {}
        }
        // Its own process group: a signal to the keeper's (a Ctrl-C in a shell)
        // is the keeper's to handle, and reaches the server as a handover or an
        // unmount, not as a kill.
        cmd.process_group(0);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", launch.exe.display()))?;
        drop(theirs);
        let reader = ours.try_clone().map_err(|e| e.to_string())?;
        let tx = tx.clone();
        std::thread::spawn(move || loop {
            match reader.recv() {
                Ok(Some((m, fds))) => {
                    if tx.send(Event::FromServer(id, m, fds)).is_err() {
                        return;
                    }
                }
                _ => {
                    let _ = tx.send(Event::ServerGone(id));
                    return;
                }
            }
        });
        Ok(Server {
            id,
            link: ours,
            child,
            build: Default::default(),
        })
    }

    /// The digest of the executable it runs: the file it was started from, as
    /// it was then, whatever is at that path now.
    pub fn build(&self) -> Option<&str> {
        self.build
            .get_or_init(|| {
                let exe = PathBuf::from(format!("/proc/{}/exe", self.child.id()));
                crate::build::digest_of(&exe).ok()
            })
            .as_deref()
    }

    pub fn kill(&self) {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGKILL) };
    }
}
