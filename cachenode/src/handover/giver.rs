//! The old node's side: serve until SIGTERM, or until a successor has taken the
//! sockets and asked to take over; then drain, let the disk go, and exit once the
//! successor serves (or serve again if it never does).

use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, oneshot};

use super::link::{Control, Link};
use super::{format, HandoverError, Message, ENV_FD};
use crate::server::App;

/// How long a successor may take to check itself and ask to take over.
const TAKE_LIMIT: Duration = Duration::from_secs(5 * 60);
/// How long a successor may take from the release to serving (opening the disk
/// tier's index is most of it).
const SERVING_LIMIT: Duration = Duration::from_secs(10 * 60);
/// Longest the old node waits for its fetched blocks to reach the disk.
const SETTLE_LIMIT: Duration = Duration::from_secs(30);
/// How long the old node goes on accepting, closing each connection after its
/// answer, before it stops: a busy client's connections all end with an answer
/// meanwhile; the drain then closes only those idle for this long.
const LINGER: Duration = Duration::from_secs(1);

/// How to start this node again: the binary it was started from (read at start,
/// so a package upgrade that replaced the file starts the new one) and its
/// arguments.
#[derive(Clone)]
pub struct Restart {
    exe: PathBuf,
    args: Vec<OsString>,
}

impl Restart {
    /// Must be called at start, before the binary can have been replaced.
    pub fn of_this_process() -> Restart {
        let exe = std::env::current_exe()
            .unwrap_or_else(|_| std::env::args_os().next().unwrap_or_default().into());
        Restart {
            exe,
            args: std::env::args_os()
                .skip(1)
                .filter(|a| a != "--upgrade")
                .collect(),
        }
    }
}

/// How [`serve`] ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// SIGTERM or SIGINT: drained, as a stop.
    Stopped,
    /// Drained after a successor (this pid) took over.
    HandedOver(u32),
}

/// A successor that asked to take over.
struct Successor {
    link: Arc<Link>,
    pid: u32,
    /// Whether it took over, for the offering task.
    done: oneshot::Sender<bool>,
}

/// Serves `listener` like [`crate::serve`] until SIGTERM or SIGINT, handing the
/// sockets over on SIGHUP or to a successor on `control`. Before a successor
/// opens the disk tier, what this node holds only in RAM is written there (for
/// at most `keep`, as on a stop).
pub async fn serve(
    listener: TcpListener,
    control: Option<Control>,
    app: Arc<App>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    drain: Duration,
    keep: Duration,
    restart: Restart,
) -> Ended {
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let http = listener
        .as_fd()
        .try_clone_to_owned()
        .expect("a listening socket can be duplicated");
    let (tx, mut rx) = mpsc::channel(1);
    offer_on_sighup_and_control(http.try_clone().expect("dup"), control, restart, tx);
    let mut listener = Some(listener);
    loop {
        let l = match listener.take() {
            Some(l) => l,
            None => match again(&http) {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!("cannot serve the listening socket again: {e}");
                    return Ended::Stopped;
                }
            },
        };
        let mut next: Option<Successor> = None;
        {
            let stop = async {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                    s = rx.recv() => next = s,
                }
                if next.is_some() {
                    super::set_draining(true);
                    tokio::time::sleep(LINGER).await;
                }
            };
            crate::serve(l, app.clone(), tls.clone(), stop, drain).await;
        }
        let Some(s) = next else {
            return Ended::Stopped;
        };
        settle(&app, SETTLE_LIMIT).await;
        app.node.keep_on_stop(keep).await;
        app.node.stop_disk_index();
        match release(&s).await {
            Ok(()) => {
                shoal::notify::send(&format!("MAINPID={}\nREADY=1", s.pid));
                let _ = s.done.send(true);
                tracing::info!("handed over to pid {}; exiting", s.pid);
                return Ended::HandedOver(s.pid);
            }
            Err(e) => {
                super::set_draining(false);
                tracing::error!(
                    "the successor (pid {}) did not take over ({e}); serving again",
                    s.pid
                );
                shoal::notify::send("READY=1");
                let _ = s.done.send(false);
            }
        }
    }
}

fn again(http: &OwnedFd) -> std::io::Result<TcpListener> {
    let l = std::net::TcpListener::from(http.try_clone()?);
    l.set_nonblocking(true)?;
    TcpListener::from_std(l)
}

/// Waits (a bounded time) until the blocks this node fetched are on disk, where
/// the successor's index finds them.
async fn settle(app: &App, limit: Duration) {
    let deadline = Instant::now() + limit;
    let mut quiet = 0;
    // A flight's last reader is answered just before its block is queued for the
    // disk: nothing queued three looks in a row is quiet.
    while quiet < 3 {
        app.node.refresh_gauges();
        if app.node.metrics.disk_writes.get() == 0 {
            quiet += 1;
        } else {
            quiet = 0;
        }
        if Instant::now() > deadline {
            tracing::warn!("blocks still on their way to disk after {limit:?}: the successor may fetch them again");
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Tells the successor the disk is its own now and waits until it serves.
async fn release(s: &Successor) -> Result<(), HandoverError> {
    s.link.send(&Message::Released.to_string(), &[])?;
    let l = s.link.clone();
    let got = tokio::task::spawn_blocking(move || l.recv_within(SERVING_LIMIT))
        .await
        .map_err(|e| HandoverError::Io(std::io::Error::other(e)))??;
    match got {
        Some((m, _)) => match Message::parse(&m)? {
            Message::Serving => Ok(()),
            _ => Err(HandoverError::Protocol(m)),
        },
        None => Err(HandoverError::Gone),
    }
}

/// Links to would-be successors: started on SIGHUP, or connecting to `control`.
fn offer_on_sighup_and_control(
    http: OwnedFd,
    control: Option<Control>,
    restart: Restart,
    to_serve: mpsc::Sender<Successor>,
) {
    let (links_tx, mut links) = mpsc::channel::<Link>(4);
    if let Some(c) = &control {
        let c = c.try_clone().expect("dup control socket");
        let tx = links_tx.clone();
        std::thread::spawn(move || loop {
            match c.accept() {
                Ok(l) => {
                    if tx.blocking_send(l).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!("control socket {}: {e}", c.path.display());
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        });
    }
    let mut hup = signal(SignalKind::hangup()).expect("SIGHUP handler");
    tokio::spawn(async move {
        loop {
            let link = tokio::select! {
                _ = hup.recv() => {
                    shoal::notify::send(&format!("RELOADING=1\nMONOTONIC_USEC={}", monotonic_usec()));
                    match start_successor(&restart) {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::error!("SIGHUP: cannot start a new node process: {e}; this one goes on");
                            shoal::notify::send("READY=1");
                            continue;
                        }
                    }
                }
                Some(l) = links.recv() => l,
            };
            let link = Arc::new(link);
            match offer(&link, &http, control.as_ref()).await {
                Ok(pid) => {
                    let (done, taken) = oneshot::channel();
                    let s = Successor { link, pid, done };
                    if to_serve.send(s).await.is_err() {
                        return;
                    }
                    if taken.await.unwrap_or(false) {
                        return;
                    }
                }
                Err(e) => {
                    tracing::error!("{e}; this node goes on serving");
                    shoal::notify::send("READY=1");
                }
            }
        }
    });
}

/// Starts this node's binary again with the successor's end of a new link.
fn start_successor(restart: &Restart) -> std::io::Result<Link> {
    let (ours, theirs) = Link::pair()?;
    let fd = theirs.inheritable()?;
    let mut child = tokio::process::Command::new(&restart.exe)
        .args(&restart.args)
        .env(ENV_FD, fd.to_string())
        .spawn()?;
    drop(theirs);
    tracing::info!(
        "SIGHUP: started {} (pid {}) to take over",
        restart.exe.display(),
        child.id().unwrap_or(0)
    );
    // Reaped if it fails; one that takes over outlives this process.
    tokio::spawn(async move {
        if let Ok(st) = child.wait().await {
            if !st.success() {
                tracing::warn!("the new node process ended: {st}");
            }
        }
    });
    Ok(ours)
}

/// One would-be successor: hello, the offer of the sockets, and its answer.
async fn offer(
    link: &Arc<Link>,
    http: &OwnedFd,
    control: Option<&Control>,
) -> Result<u32, HandoverError> {
    // The abstract namespace has no file permissions: the peer's user is the
    // check (this node's, or root).
    let uid = link.peer_uid()?;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if uid != me && uid != 0 {
        return Err(HandoverError::Refused(format!(
            "a process of uid {uid} asked to take over"
        )));
    }
    let l = link.clone();
    let hello = tokio::task::spawn_blocking(move || l.recv_within(Duration::from_secs(30)))
        .await
        .map_err(|e| HandoverError::Io(std::io::Error::other(e)))??
        .ok_or(HandoverError::Gone)?
        .0;
    let Message::Hello {
        pid,
        version,
        format: theirs,
    } = Message::parse(&hello)?
    else {
        return Err(HandoverError::Protocol(hello));
    };
    tracing::info!("shoal-node {version} (pid {pid}, disk tier format {theirs}) asks to take over");
    let mut fds = vec![http.as_raw_fd()];
    fds.extend(control.map(|c| c.raw()));
    let offer = Message::Offer {
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").into(),
        format: format::disk_format(),
        control: control.is_some(),
    };
    link.send(&offer.to_string(), &fds)?;
    let l = link.clone();
    let answer = tokio::task::spawn_blocking(move || l.recv_within(TAKE_LIMIT))
        .await
        .map_err(|e| HandoverError::Io(std::io::Error::other(e)))??;
    match answer {
        Some((m, _)) => match Message::parse(&m)? {
            Message::Take => Ok(pid),
            Message::Refuse(why) => Err(HandoverError::TheyRefused(pid, why)),
            _ => Err(HandoverError::Protocol(m)),
        },
        None => Err(HandoverError::Gone),
    }
}

fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: one timespec, ours.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}
