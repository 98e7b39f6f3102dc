//! The keeper: the small process that holds a mount's kernel connection (the
//! `/dev/fuse` descriptor) and its journal, and runs the [`crate::server`] that
//! answers it. Whoever serves may change; the connection may not.
//!
//! - A server that dies (a crash, `SIGKILL`, the OOM killer) is started again on
//!   the same connection with the journal: the calls it had taken are sent again
//!   by the kernel (or, on kernels without resend, fail once), later calls wait
//!   for the successor, and no reader of the mount ever sees `ENOTCONN`.
//! - `SIGHUP` or `shoal-mount --restart MOUNTPOINT` hands over on purpose (an
//!   upgrade: the successor is the binary now at the keeper's path): the
//!   successor is started and checked first, the old server drains (answers
//!   everything it took, takes nothing new), then the successor takes over.
//! - `SIGTERM`/`SIGINT` or `--unmount` unmount; an unmount from outside ends it.
//! - Its control socket answers `status` (with the keeper's version and the
//!   digest of the server's executable, [`crate::build`]), `restart`,
//!   `unmount`, and `fds` (a copy of the device and the journal, for a CSI
//!   driver that keeps one so that even the keeper may be replaced).
//!
//! The keeper does no I/O of its own beyond this: what can fail (the network,
//! the disk tier, memory) fails in the server, which it replaces.

use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::{Duration, Instant};

use crate::journal::Journal;
use crate::kernel;
use crate::link::{Msg, Start};

mod outside;
mod private_dir;
mod server;

use outside::{adopted_fds, control_socket, signals};
pub use outside::{ask, ask_fds, ask_within, default_control_socket};
use server::Server;
pub use server::{Launch, Log, ADOPT_ENV, LINK_ENV};

/// Longest a server may take to check its config and bucket before it is given
/// the connection.
pub(super) const PREPARE_LIMIT: Duration = Duration::from_secs(60);
/// Longest a planned handover waits for the old server to drain and exit.
pub(super) const HANDOVER_LIMIT: Duration = Duration::from_secs(90);
const UNMOUNT_WAIT: Duration = Duration::from_secs(3);

pub(super) enum Event {
    FromServer(u64, Msg, Vec<OwnedFd>),
    /// The server's end of its link closed: it exited.
    ServerGone(u64),
    Signal(i32),
    Control(String, UnixStream),
}

pub struct Keeper {
    mountpoint: PathBuf,
    launch: Launch,
    device: OwnedFd,
    journal: OwnedFd,
    events: Receiver<Event>,
    tx: Sender<Event>,
    /// Events that came while waiting for another.
    later: VecDeque<Event>,
    next_id: u64,
    server: Option<Server>,
    restarts: u64,
    handovers: u64,
    /// The FUSE connection's number under /sys/fs/fuse/connections.
    connection: Option<u32>,
    control: PathBuf,
}

impl Keeper {
    /// Mounts `mountpoint` (or adopts a live connection handed over in
    /// [`ADOPT_ENV`]), starts the first server, and calls `ready` once it serves.
    pub fn start(
        mountpoint: PathBuf,
        opts: &kernel::mount::MountOptions,
        launch: Launch,
        control: PathBuf,
        ready: impl FnOnce(),
    ) -> Result<Keeper, String> {
        let (tx, events) = channel();
        signals(tx.clone())?;
        control_socket(&control, tx.clone())?;
        let adopted = adopted_fds()?;
        let mut k = Keeper {
            mountpoint,
            launch,
            // Placeholders until mounted: replaced below.
            device: dup_null()?,
            journal: dup_null()?,
            events,
            tx,
            later: VecDeque::new(),
            next_id: 1,
            server: None,
            restarts: 0,
            handovers: 0,
            connection: None,
            control: control.clone(),
        };
        let server = k.spawn_server()?;
        k.prepared(&server)?;
        let adopting = adopted.is_some();
        let start = match adopted {
            Some((dev, journal)) => {
                k.device = dev;
                k.journal = journal;
                Start::AfterCrash
            }
            None => {
                k.device = kernel::mount::mount(&k.mountpoint, opts).map_err(|e| {
                    format!(
                        "cannot mount on {}: {e} (is fuse3 installed, and /dev/fuse usable?)",
                        k.mountpoint.display()
                    )
                })?;
                k.journal = Journal::create()
                    .map_err(|e| format!("cannot keep the mount's state: {e}"))?
                    .into_fd();
                Start::New
            }
        };
        if let Err(e) = k.take(&server, start) {
            if !adopting {
                let _ = kernel::mount::unmount(&k.mountpoint, true);
                return Err(e);
            }
            // An adopted connection is live (pods may be reading it) and not
            // ours to end: a server that cannot take it over (a damaged
            // journal) is what a crash is. Servers are tried again, and the
            // keeper answers EIO meanwhile.
            tracing::error!(
                "the first server could not take {} over: {e}",
                k.mountpoint.display()
            );
            server.kill();
            k.later.push_back(Event::ServerGone(server.id));
        }
        // Only now: a stat of the mount waits for a server to answer it.
        k.connection = crate::connection_id(&k.mountpoint);
        k.server = Some(server);
        ready();
        Ok(k)
    }

    /// Keeps the mount served until it is unmounted.
    pub fn run(mut self) -> Result<(), String> {
        loop {
            match self.next(None) {
                Some(Event::FromServer(_, Msg::Unmounted, _)) => {
                    tracing::info!("{} was unmounted", self.mountpoint.display());
                    self.wait_server_exit(UNMOUNT_WAIT);
                    let _ = std::fs::remove_file(&self.control);
                    return Ok(());
                }
                Some(Event::FromServer(id, m, _)) => {
                    tracing::debug!(id, "server said {m:?}");
                }
                Some(Event::ServerGone(id)) if self.server.as_ref().is_some_and(|s| s.id == id) => {
                    let status = self.reap();
                    tracing::warn!(
                        "the server of {} exited ({status}); starting another on the same connection",
                        self.mountpoint.display()
                    );
                    self.restart_after_crash();
                }
                Some(Event::ServerGone(_)) => {}
                Some(Event::Signal(libc::SIGHUP)) => {
                    if let Err(e) = self.handover() {
                        tracing::error!("restart failed: {e}");
                    }
                }
                Some(Event::Signal(_)) => return self.unmount(),
                Some(Event::Control(cmd, conn)) => {
                    if self.control(&cmd, conn) {
                        return self.unmount();
                    }
                }
                None => return Ok(()),
            }
        }
    }

    /// Answers one control command; true when it asks to unmount.
    fn control(&mut self, cmd: &str, mut conn: UnixStream) -> bool {
        let answer = match cmd {
            "status" => Ok(self.status()),
            "restart" => self.handover().map(|()| self.status()),
            "unmount" => {
                let _ = writeln!(conn, "unmounting");
                return true;
            }
            "fds" => {
                let fds = [self.device.as_raw_fd(), self.journal.as_raw_fd()];
                if let Err(e) = kernel::mount::send_fds(&conn, b'f', &fds) {
                    tracing::warn!("cannot hand out the mount's descriptors: {e}");
                }
                return false;
            }
            other => Err(format!("unknown command {other:?}")),
        };
        let _ = match answer {
            Ok(a) => writeln!(conn, "{a}"),
            Err(e) => writeln!(conn, "error {e}"),
        };
        false
    }

    fn status(&self) -> String {
        serde_json::json!({
            "mountpoint": self.mountpoint,
            "keeper": std::process::id(),
            "version": crate::build::this(),
            "server": self.server.as_ref().map(|s| s.child.id()),
            "server_build": self.server.as_ref().and_then(|s| s.build()),
            "restarts": self.restarts,
            "handovers": self.handovers,
        })
        .to_string()
    }

    fn spawn_server(&mut self) -> Result<Server, String> {
        let id = self.next_id;
        self.next_id += 1;
        Server::spawn(&self.launch, id, &self.tx)
    }

    /// The next event (one put aside first), within `limit` if given.
    fn next(&mut self, limit: Option<Duration>) -> Option<Event> {
        if let Some(e) = self.later.pop_front() {
            return Some(e);
        }
        match limit {
            Some(l) => self.events.recv_timeout(l).ok(),
            None => self.events.recv().ok(),
        }
    }

    /// Waits for server `id` to say something `want` accepts; other events are
    /// put aside for later. The server's exit, or `limit` passing, is an error.
    fn wait_for(
        &mut self,
        id: u64,
        limit: Duration,
        want: impl Fn(&Msg) -> bool,
    ) -> Result<(Msg, Vec<OwnedFd>), String> {
        let deadline = Instant::now() + limit;
        let mut aside = Vec::new();
        let r = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(Event::FromServer(i, Msg::Failed(why), _)) if i == id => break Err(why),
                Ok(Event::FromServer(i, m, fds)) if i == id && want(&m) => break Ok((m, fds)),
                Ok(Event::ServerGone(i)) if i == id => {
                    break Err("the server exited before it could serve".into())
                }
                Ok(e) => aside.push(e),
                Err(_) => break Err(format!("the server gave no answer within {limit:?}")),
            }
        };
        self.later.extend(aside);
        r
    }

    fn prepared(&mut self, s: &Server) -> Result<(), String> {
        self.wait_for(s.id, PREPARE_LIMIT, |m| *m == Msg::Prepared)
            .map(drop)
    }

    /// Hands server `s` the connection and waits until it serves, keeping the
    /// compacted journal it sends back on the way.
    fn take(&mut self, s: &Server, start: Start) -> Result<(), String> {
        let fds: [RawFd; 2] = [self.device.as_raw_fd(), self.journal.as_raw_fd()];
        s.link
            .send(&Msg::Take(start), &fds)
            .map_err(|e| format!("cannot hand the connection over: {e}"))?;
        loop {
            let (m, mut fds) = self.wait_for(s.id, PREPARE_LIMIT, |m| {
                matches!(m, Msg::Journal | Msg::Serving)
            })?;
            match m {
                Msg::Journal => {
                    if let Some(j) = fds.pop() {
                        self.journal = j;
                    }
                    s.link
                        .send(&Msg::JournalKept, &[])
                        .map_err(|e| e.to_string())?;
                }
                _ => return Ok(()),
            }
        }
    }

    /// The exit status of the current server, once it has exited.
    fn reap(&mut self) -> String {
        match self.server.take() {
            Some(mut s) => match s.child.wait() {
                Ok(st) => st.to_string(),
                Err(e) => e.to_string(),
            },
            None => "gone".into(),
        }
    }

    /// Starts servers until one takes over, waiting a little longer after each
    /// that fails. Requests wait for the first tries; past them the keeper
    /// answers them itself, with `EIO`, until a server takes over: a mount that
    /// cannot be served fails its calls, it never stalls them.
    fn restart_after_crash(&mut self) {
        let mut pause = Duration::from_millis(100);
        let mut refusing: Option<kernel::Running> = None;
        for attempt in 1.. {
            self.restarts += 1;
            let next = self.spawn_server().and_then(|s| {
                self.prepared(&s)?;
                Ok(s)
            });
            let next = next.and_then(|s| {
                // The stand-in answered what it took: nothing to send again from
                // it; what the dead server took is sent again either way.
                if let Some(r) = refusing.take() {
                    r.stop();
                    r.join();
                }
                self.take(&s, Start::AfterCrash).map(|()| s)
            });
            match next {
                Ok(s) => {
                    tracing::info!("a new server took over {}", self.mountpoint.display());
                    self.server = Some(s);
                    return;
                }
                Err(e) => {
                    tracing::error!(
                        "a new server could not take over: {e}; trying again in {pause:?}"
                    );
                    if attempt == 3 && refusing.is_none() {
                        refusing = self.refuse();
                    }
                    if self.stop_requested() {
                        if let Some(r) = refusing.take() {
                            r.stop();
                            r.join();
                        }
                        return;
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_secs(10));
                }
            }
        }
    }

    /// Answers every request with `EIO` from this process, until stopped.
    fn refuse(&self) -> Option<kernel::Running> {
        let dev = self.device.try_clone().ok()?;
        let chan = std::sync::Arc::new(kernel::Channel::new(dev).ok()?);
        tracing::error!(
            "no server can take {} over: its calls fail (EIO) until one can",
            self.mountpoint.display()
        );
        kernel::Running::refusing(chan, libc::EIO).ok()
    }

    /// Whether an unmount or a terminating signal waits among the events.
    fn stop_requested(&mut self) -> bool {
        while let Ok(e) = self.events.try_recv() {
            self.later.push_back(e);
        }
        self.later.iter().any(|e| match e {
            Event::Signal(s) => *s != libc::SIGHUP,
            Event::Control(c, _) => c == "unmount",
            _ => false,
        })
    }

    /// A planned handover: the successor is started and checked first; the old
    /// server drains; then the successor takes over.
    fn handover(&mut self) -> Result<(), String> {
        let next = self.spawn_server()?;
        if let Err(e) = self.prepared(&next) {
            next.kill();
            return Err(format!(
                "the new server cannot start, the old one goes on: {e}"
            ));
        }
        let old = self.server.take().ok_or("no server is running")?;
        let _ = old.link.send(&Msg::Stop, &[]);
        let drained = self
            .wait_for(old.id, HANDOVER_LIMIT, |m| *m == Msg::Drained)
            .is_ok();
        let mut old = old;
        let deadline = Instant::now() + HANDOVER_LIMIT;
        while old.child.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                old.kill();
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let start = if drained {
            Start::Handover
        } else {
            Start::AfterCrash
        };
        match self.take(&next, start) {
            Ok(()) => {
                self.handovers += 1;
                self.server = Some(next);
                tracing::info!("handed {} over to a new server", self.mountpoint.display());
                Ok(())
            }
            Err(e) => {
                next.kill();
                self.restart_after_crash();
                Err(format!(
                    "the new server failed to take over ({e}); another did"
                ))
            }
        }
    }

    fn wait_server_exit(&mut self, limit: Duration) {
        if let Some(mut s) = self.server.take() {
            let deadline = Instant::now() + limit;
            while s.child.try_wait().ok().flatten().is_none() {
                if Instant::now() > deadline {
                    s.kill();
                    let _ = s.child.wait();
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// Unmounts, and waits for the server to see it.
    fn unmount(mut self) -> Result<(), String> {
        tracing::info!("unmounting {}", self.mountpoint.display());
        if let Err(e) = kernel::mount::unmount(&self.mountpoint, false) {
            tracing::warn!("unmount failed ({e}); detaching lazily");
            let _ = kernel::mount::unmount(&self.mountpoint, true);
        }
        let ended = self.server.as_ref().map(|s| s.id).and_then(|id| {
            self.wait_for(id, UNMOUNT_WAIT, |m| *m == Msg::Unmounted)
                .ok()
        });
        if ended.is_none() {
            // Unmounted here, but the connection lives on: a mount namespace made
            // after the mount (a container) holds a copy of it, so the kernel
            // keeps asking. End it rather than hang: through fusectl, else by
            // exiting, which closes the device.
            tracing::warn!(
                "{} is still held by another mount namespace; ending its FUSE connection",
                self.mountpoint.display()
            );
            if let Some(id) = self.connection {
                crate::abort_connection(id);
            }
        }
        self.wait_server_exit(UNMOUNT_WAIT);
        let _ = std::fs::remove_file(&self.control);
        Ok(())
    }
}

fn dup_null() -> Result<OwnedFd, String> {
    std::fs::File::open("/dev/null")
        .map(OwnedFd::from)
        .map_err(|e| e.to_string())
}
