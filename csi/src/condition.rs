//! A published volume's condition, as NodeGetVolumeStats reports it, from a
//! look at its mount: still a FUSE mount in the mount table, its root
//! answering a stat within a deadline, and its keeper answering with a server
//! at work. A stat of a hung FUSE mount may never return: it runs on a thread
//! of its own, which the caller does not wait for past the deadline, and no
//! second one is started for that mount while it hangs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Longest the root of a mount may take to answer a stat.
pub const STAT_LIMIT: Duration = Duration::from_secs(2);
/// Longest its keeper may take to say how it is.
pub const KEEPER_LIMIT: Duration = Duration::from_secs(1);

/// What a look found.
pub struct Look {
    /// The file system's figures, when its root answered.
    pub usage: Option<libc::statvfs>,
    /// What is wrong; nothing for a healthy mount.
    pub problems: Vec<String>,
    /// Its keeper's status, when it answered.
    pub status: Option<serde_json::Value>,
}

/// Looks at the mount on `target`, kept by the keeper listening on `control`.
pub fn look(target: &Path, control: &Path) -> Look {
    let mut problems = Vec::new();
    match fs_type(target) {
        None => problems.push(format!("{} is not mounted", target.display())),
        Some(t) if t != "fuse" && !t.starts_with("fuse.") => problems.push(format!(
            "{} is a {t} mount, not the volume's FUSE mount",
            target.display()
        )),
        Some(_) => {}
    }
    let usage = match stat(target) {
        Ok(s) => Some(s),
        Err(why) => {
            problems.push(why);
            None
        }
    };
    let status = match keeper(control) {
        Ok(s) => Some(s),
        Err(why) => {
            problems.push(why);
            None
        }
    };
    Look {
        usage,
        problems,
        status,
    }
}

/// The type of the topmost mount on `target` in this process's mount table.
pub fn fs_type(target: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = target.to_string_lossy();
    info.lines().rev().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let point = unescape(left.split(' ').nth(4)?);
        let kind = right.split(' ').next()?;
        (point == want).then(|| kind.to_owned())
    })
}

/// A mount table's path, its space, tab, newline and backslash octal-escaped.
fn unescape(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// Stats that have not returned, by mount, since when.
fn hung() -> &'static Mutex<HashMap<PathBuf, Instant>> {
    static HUNG: OnceLock<Mutex<HashMap<PathBuf, Instant>>> = OnceLock::new();
    HUNG.get_or_init(Default::default)
}

/// `statvfs` of `target`, within [`STAT_LIMIT`].
fn stat(target: &Path) -> Result<libc::statvfs, String> {
    if let Some(since) = hung().lock().unwrap().get(target) {
        return Err(format!(
            "{} has not answered a stat for {} s",
            target.display(),
            since.elapsed().as_secs()
        ));
    }
    let c = std::ffi::CString::new(target.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{}: a path with a NUL byte", target.display()))?;
    hung()
        .lock()
        .unwrap()
        .insert(target.to_owned(), Instant::now());
    let (tx, rx) = std::sync::mpsc::channel();
    let path = target.to_owned();
    std::thread::spawn(move || {
        // SAFETY: statvfs into a zeroed struct, with a NUL-terminated path.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        let r = if unsafe { libc::statvfs(c.as_ptr(), &mut s) } == 0 {
            Ok(s)
        } else {
            Err(std::io::Error::last_os_error())
        };
        hung().lock().unwrap().remove(&path);
        let _ = tx.send(r);
    });
    match rx.recv_timeout(STAT_LIMIT) {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(format!("{} answers a stat with: {e}", target.display())),
        Err(_) => Err(format!(
            "{} did not answer a stat within {STAT_LIMIT:?}",
            target.display()
        )),
    }
}

/// The status of the keeper on `control`, if it answers with a server serving.
fn keeper(control: &Path) -> Result<serde_json::Value, String> {
    let status = keeper_status(control)?;
    if status["server"].is_null() {
        return Err("its keeper has no server serving it".into());
    }
    Ok(status)
}

/// The status of the keeper on `control`, parsed.
pub fn keeper_status(control: &Path) -> Result<serde_json::Value, String> {
    let answer = shoal_mount::keeper::ask_within(control, "status", KEEPER_LIMIT)
        .map_err(|e| format!("its keeper does not answer: {e}"))?;
    serde_json::from_str(&answer)
        .map_err(|e| format!("its keeper answers what is not its status ({e}): {answer}"))
}
