//! What reaches a keeper from outside it: signals, its control socket (and the
//! client side of it, for `--restart`, `--status` and a CSI driver), and a live
//! connection handed to it to adopt.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::time::Duration;

use super::{private_dir, Event, ADOPT_ENV, HANDOVER_LIMIT, PREPARE_LIMIT};
use crate::kernel;

/// The control socket of the mount on `mountpoint` (canonical), unless named.
pub fn default_control_socket(mountpoint: &Path) -> PathBuf {
    let h = xxhash_rust::xxh3::xxh3_64(mountpoint.as_os_str().as_encoded_bytes());
    default_dir().join(format!("{h:016x}.sock"))
}

/// Where a user's control sockets go by default: a directory of theirs alone
/// (see [`private_dir`]). `/tmp`'s is the last resort: its name is known to
/// every user, so one who made it first makes the keeper refuse to start.
fn default_dir() -> PathBuf {
    // SAFETY: a plain getter.
    let uid = unsafe { libc::getuid() };
    if uid == 0 {
        return PathBuf::from("/run/shoal-mount");
    }
    let runtime = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from(format!("/run/user/{uid}"))).filter(|d| d.is_dir()));
    match runtime {
        Some(d) => d.join("shoal-mount"),
        None => PathBuf::from(format!("/tmp/shoal-mount-{uid}")),
    }
}

/// Sends `cmd` to the keeper listening on `socket`; returns its answer.
pub fn ask(socket: &Path, cmd: &str) -> Result<String, String> {
    ask_within(socket, cmd, HANDOVER_LIMIT + PREPARE_LIMIT)
}

/// [`ask`], waiting at most `limit` for the answer (a keeper busy starting a
/// server answers once it is done).
pub fn ask_within(socket: &Path, cmd: &str, limit: Duration) -> Result<String, String> {
    let mut s = UnixStream::connect(socket).map_err(|e| {
        format!(
            "no shoal-mount keeper answers on {}: {e} (is it mounted, and by this user?)",
            socket.display()
        )
    })?;
    s.set_read_timeout(Some(limit)).map_err(|e| e.to_string())?;
    // A keeper that refuses us may have said so and closed before we asked.
    let asked = writeln!(s, "{cmd}");
    let mut answer = String::new();
    BufReader::new(&s)
        .read_line(&mut answer)
        .map_err(|e| format!("the keeper did not answer: {e}"))?;
    if answer.is_empty() {
        asked.map_err(|e| e.to_string())?;
    }
    let answer = answer.trim_end().to_owned();
    match answer.strip_prefix("error ") {
        Some(e) => Err(e.to_owned()),
        None => Ok(answer),
    }
}

/// Asks for a copy of the mount's device and journal (`fds`).
pub fn ask_fds(socket: &Path) -> Result<(OwnedFd, OwnedFd), String> {
    let mut s = UnixStream::connect(socket).map_err(|e| e.to_string())?;
    writeln!(s, "fds").map_err(|e| e.to_string())?;
    let mut fds = kernel::mount::receive_fds(&s).map_err(|e| e.to_string())?;
    match (fds.pop(), fds.pop()) {
        (Some(journal), Some(dev)) => Ok((dev, journal)),
        _ => Err("the keeper sent no descriptors".into()),
    }
}

/// The live connection a keeper is handed to adopt, if any.
pub(super) fn adopted_fds() -> Result<Option<(OwnedFd, OwnedFd)>, String> {
    let Some(v) = std::env::var_os(ADOPT_ENV) else {
        return Ok(None);
    };
    let v = v.to_string_lossy().into_owned();
    let parse = |s: &str| -> Result<OwnedFd, String> {
        let fd: RawFd = s
            .trim()
            .parse()
            .map_err(|_| format!("{ADOPT_ENV}={v}: not two descriptors"))?;
        // SAFETY: a descriptor our parent left open for us, owned from here.
        let owned = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        // Not passed on to the servers by inheritance: they get copies.
        // SAFETY: setting FD_CLOEXEC on a descriptor we own.
        unsafe { libc::fcntl(owned.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
        Ok(owned)
    };
    let (a, b) = v
        .split_once(',')
        .ok_or_else(|| format!("{ADOPT_ENV}={v}: not two descriptors"))?;
    Ok(Some((parse(a)?, parse(b)?)))
}

/// SIGTERM, SIGINT and SIGHUP as events, from a thread of their own.
pub(super) fn signals(tx: Sender<Event>) -> Result<(), String> {
    // SAFETY: building and installing a signal mask for this thread (and those it
    // starts, which inherit it); sigwait then takes the signals synchronously.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err("cannot block signals".into());
        }
        std::thread::spawn(move || loop {
            let mut sig = 0;
            if libc::sigwait(&set, &mut sig) == 0 && tx.send(Event::Signal(sig)).is_err() {
                return;
            }
        });
    }
    Ok(())
}

/// Listens on `path` for control commands, one line per connection, from this
/// user or root only: `fds` hands out the mount's device.
pub(super) fn control_socket(path: &Path, tx: Sender<Event>) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        if dir == default_dir() {
            private_dir::private(dir)
        } else {
            private_dir::named(dir)
        }
        .map_err(|e| e.to_string())?;
    }
    // A socket left by a keeper that is gone.
    if UnixStream::connect(path).is_err() {
        let _ = std::fs::remove_file(path);
    }
    let listener =
        UnixListener::bind(path).map_err(|e| format!("control socket {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("control socket {}: {e}", path.display()))?;
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            if let Err(why) = admitted(&conn) {
                tracing::warn!("control socket: refused a connection: {why}");
                let _ = writeln!(&conn, "error refused: {why}");
                continue;
            }
            let mut line = String::new();
            let Ok(c) = conn.try_clone() else { continue };
            let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
            if BufReader::new(c).read_line(&mut line).is_ok()
                && tx
                    .send(Event::Control(line.trim().to_owned(), conn))
                    .is_err()
            {
                return;
            }
        }
    });
    Ok(())
}

/// Whether the process at the other end of `conn` may command the keeper: its
/// user (when it connected) is ours or root.
fn admitted(conn: &UnixStream) -> Result<(), String> {
    // SAFETY: getsockopt fills a ucred of the size given.
    let cred = unsafe {
        let mut cred: libc::ucred = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        if libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        ) != 0
        {
            return Err(format!(
                "cannot tell who connected: {}",
                std::io::Error::last_os_error()
            ));
        }
        cred
    };
    // SAFETY: a plain getter.
    let uid = unsafe { libc::getuid() };
    if cred.uid == 0 || cred.uid == uid || cred.uid == private_dir::euid() {
        Ok(())
    } else {
        Err(format!(
            "uid {} (pid {}) is neither this keeper's user (uid {uid}) nor root",
            cred.uid, cred.pid
        ))
    }
}
