//! Noticing a mount's keeper die as it dies: each live keeper is watched
//! through a pidfd, which turns readable when the process exits, and its
//! death wakes the plugin's pass that starts another keeper on the same
//! connection ([`crate::Plugin::watch_keepers`]). Until then the mount's
//! readers wait, so a second's polling was up to a second of every read
//! stalled. The pass still runs every second for what no pidfd sees: a keeper
//! that could not be asked its PID, or a kernel without `pidfd_open` (5.3).

use std::collections::HashMap;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

/// How long a keeper may take to say its PID before it is left to the polling.
const ASK_LIMIT: Duration = Duration::from_secs(2);

#[derive(Default)]
pub struct KeeperDeaths {
    /// Woken by each death.
    died: Arc<Notify>,
    /// The keeper watched for each target, by PID.
    watched: Arc<Mutex<HashMap<PathBuf, i32>>>,
}

impl KeeperDeaths {
    /// Waits for the next keeper death, or `tick`'s next tick.
    pub async fn next(&self, tick: &mut tokio::time::Interval) {
        tokio::select! {
            _ = tick.tick() => {}
            _ = self.died.notified() => {}
        }
    }

    /// Watches the keeper answering on `control` (the mount at `target`)
    /// unless it is watched already. Blocking (it asks the keeper); from a
    /// thread of the runtime's blocking pool.
    pub fn watch(&self, target: &Path, control: &Path) {
        if self.watched.lock().unwrap().contains_key(target) {
            return;
        }
        let Some(pid) = keeper_pid(control) else {
            return;
        };
        let pidfd = match pidfd_open(pid) {
            Ok(fd) => fd,
            Err(e) => {
                tracing::debug!("cannot watch keeper {pid} of {}: {e}", target.display());
                return;
            }
        };
        // The PID named a process when it was asked; if that keeper died
        // before its pidfd was opened, the PID may be another process's now,
        // and the keeper's socket refuses connections.
        if !crate::published::keeper_listens(control) {
            self.died.notify_one();
            return;
        }
        // SAFETY: the pidfd is owned by the AsyncFd for its whole life, and
        // an OwnedFd always gives the same descriptor.
        let fd = match unsafe {
            AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
        } {
            Ok(fd) => fd,
            Err(e) => {
                tracing::debug!("cannot watch keeper {pid}: {e}");
                return;
            }
        };
        self.watched.lock().unwrap().insert(target.to_owned(), pid);
        let (died, watched, target) = (self.died.clone(), self.watched.clone(), target.to_owned());
        tokio::spawn(async move {
            let _ = fd.readable().await;
            {
                let mut w = watched.lock().unwrap();
                if w.get(&target) == Some(&pid) {
                    w.remove(&target);
                }
            }
            tracing::debug!("keeper {pid} of {} exited", target.display());
            died.notify_one();
        });
    }
}

/// The PID of the keeper answering on `control`, from its status.
fn keeper_pid(control: &Path) -> Option<i32> {
    let status = shoal_mount::keeper::ask_within(control, "status", ASK_LIMIT).ok()?;
    let v: serde_json::Value = serde_json::from_str(&status).ok()?;
    v["keeper"].as_u64().and_then(|p| i32::try_from(p).ok())
}

fn pidfd_open(pid: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a PID and flags and returns a new descriptor
    // (or -1); no memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor just returned to us, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
