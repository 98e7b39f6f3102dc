//! A FUSE session: the INIT handshake (or, for a daemon taking over a live
//! connection, what an earlier one agreed), then reader threads that take
//! requests off the channel and hand each to the [`Handler`] with its [`Reply`].
//!
//! Readers stop when told ([`Stop`]) without dropping a request: each waits in
//! `poll` on the device and the stop signal, and reads only what is there. What
//! they took and have not answered is counted, so a planned handover waits for
//! it to drain.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};

use super::abi::{self, init, Out};
use super::channel::{Channel, Received, Stop};
use super::reply::Reply;
use super::request::{parse, Header, Op};

/// What the kernel and this filesystem agreed at INIT: a successor serving the
/// same connection speaks exactly this.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Negotiated {
    pub minor: u32,
    /// The INIT flags both sides have.
    pub flags: u64,
    /// What the kernel offered (`HAS_RESEND` among them).
    pub offered: u64,
}

impl Negotiated {
    pub fn passthrough(&self) -> bool {
        self.flags & init::PASSTHROUGH != 0
    }

    /// Whether requests a dead reader took can be asked for again.
    pub fn resend(&self) -> bool {
        self.offered & init::HAS_RESEND != 0
    }
}

/// What the filesystem asks for at INIT.
pub struct Wants {
    pub flags: u64,
    pub max_readahead: u32,
    pub max_background: u16,
    pub congestion_threshold: u16,
    /// Reads of up to this many pages per request.
    pub max_pages: u16,
}

/// The largest write the kernel may send: writes are refused, so what it bounds
/// is only the request buffer each reader needs.
const MAX_WRITE: u32 = 64 << 10;
/// A reader's buffer: the kernel wants room for a write of `MAX_WRITE` and its
/// headers, and at least 8 KiB.
const BUFFER: usize = MAX_WRITE as usize + 4096;

/// Handles each request the readers take.
pub trait Handler: Send + Sync + 'static {
    /// A request the kernel waits on: answered through `reply`, now or later.
    fn request(&self, h: &Header, op: Op<'_>, reply: Reply);
    /// One it does not (FORGET, INTERRUPT).
    fn notice(&self, _h: &Header, _op: Op<'_>) {}
}

/// Reads the kernel's INIT from a new connection and answers it with what both
/// sides have of `wants`.
pub fn handshake(chan: &Channel, wants: &Wants) -> io::Result<Negotiated> {
    let stop = Stop::new()?;
    let mut buf = vec![0u8; BUFFER];
    loop {
        let n = match chan.receive(&mut buf, &stop)? {
            Received::Request(n) => n,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "the connection ended before INIT",
                ))
            }
        };
        let (h, op) = parse(&buf[..n]).map_err(|m| {
            io::Error::new(io::ErrorKind::InvalidData, format!("bad INIT: {}", m.0))
        })?;
        let Op::Init {
            major,
            minor,
            max_readahead,
            flags,
        } = op
        else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the kernel's first request is opcode {}, not INIT",
                    h.opcode
                ),
            ));
        };
        let mut out = Out::default();
        if major > abi::MAJOR {
            // A newer kernel: say which major we speak; it sends INIT again.
            out.u32(abi::MAJOR).u32(abi::MINOR);
            send(chan, h.unique, 0, &out.0)?;
            continue;
        }
        if major < abi::MAJOR || minor < abi::MIN_MINOR {
            send(chan, h.unique, libc::EPROTO, &[])?;
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "the kernel speaks FUSE {major}.{minor}; shoal needs {}.{} or later",
                    abi::MAJOR,
                    abi::MIN_MINOR
                ),
            ));
        }
        let agreed = flags & (wants.flags | init::INIT_EXT);
        let negotiated = Negotiated {
            minor: minor.min(abi::MINOR),
            flags: agreed,
            offered: flags,
        };
        out.u32(abi::MAJOR)
            .u32(negotiated.minor)
            .u32(max_readahead.min(wants.max_readahead))
            .u32(agreed as u32)
            .u16(wants.max_background)
            .u16(wants.congestion_threshold)
            .u32(MAX_WRITE)
            .u32(1)
            .u16(wants.max_pages)
            .u16(0)
            .u32((agreed >> 32) as u32)
            // Passthrough backing files sit on a plain filesystem: depth 1.
            .u32(if negotiated.passthrough() { 1 } else { 0 })
            .zeros(24);
        send(chan, h.unique, 0, &out.0)?;
        return Ok(negotiated);
    }
}

fn send(chan: &Channel, unique: u64, error: i32, body: &[u8]) -> io::Result<()> {
    let mut h = Out::default();
    h.u32((abi::OUT_HEADER + body.len()) as u32)
        .i32(-error)
        .u64(unique);
    chan.send(&[io::IoSlice::new(&h.0), io::IoSlice::new(body)])
}

/// How a session's readers ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Told to stop: the connection lives on for a successor.
    Stopped,
    /// Unmounted, or the kernel ended the connection (DESTROY).
    Unmounted,
}

/// Reader threads serving one connection.
pub struct Running {
    stop: Arc<Stop>,
    pending: Arc<AtomicUsize>,
    gone: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Running {
    /// Readers on `chan` (each on its own cloned descriptor if `clone`), handing
    /// requests to `handler`.
    pub fn start<H: Handler>(
        chan: Arc<Channel>,
        handler: Arc<H>,
        readers: usize,
        clone: bool,
    ) -> io::Result<Running> {
        let stop = Arc::new(Stop::new()?);
        let pending = Arc::new(AtomicUsize::new(0));
        let gone = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for i in 0..readers.max(1) {
            let chan = if clone {
                Arc::new(chan.clone_dev()?)
            } else {
                chan.clone()
            };
            let (handler, stop, pending, gone) =
                (handler.clone(), stop.clone(), pending.clone(), gone.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("fuse-{i}"))
                    .spawn(move || read_loop(&chan, &*handler, &stop, &pending, &gone))?,
            );
        }
        Ok(Running {
            stop,
            pending,
            gone,
            threads,
        })
    }

    /// Tells the readers to stop taking requests.
    pub fn stop(&self) {
        self.stop.stop();
    }

    /// Answers still owed for requests already taken.
    pub fn pending(&self) -> usize {
        self.pending.load(Relaxed)
    }

    /// Whether the connection has ended (every reader then stops).
    pub fn unmounted(&self) -> bool {
        self.gone.load(Relaxed)
    }

    /// Waits for every reader to end.
    pub fn join(self) -> Ended {
        for t in self.threads {
            let _ = t.join();
        }
        if self.gone.load(Relaxed) {
            Ended::Unmounted
        } else {
            Ended::Stopped
        }
    }
}

fn read_loop<H: Handler>(
    chan: &Arc<Channel>,
    handler: &H,
    stop: &Stop,
    pending: &Arc<AtomicUsize>,
    gone: &AtomicBool,
) {
    let mut buf = vec![0u8; BUFFER];
    loop {
        let n = match chan.receive(&mut buf, stop) {
            Ok(Received::Request(n)) => n,
            Ok(Received::Stopped) => return,
            Ok(Received::Gone) => break,
            Err(e) => {
                tracing::error!("reading the FUSE device failed: {e}");
                break;
            }
        };
        match parse(&buf[..n]) {
            Ok((h, Op::Destroy)) => {
                Reply::new(h.unique, chan.clone(), pending.clone()).ok();
                break;
            }
            Ok((h, op)) if !op.wants_reply() => handler.notice(&h, op),
            Ok((h, op)) => {
                handler.request(&h, op, Reply::new(h.unique, chan.clone(), pending.clone()))
            }
            Err(m) => {
                tracing::warn!("malformed FUSE request ({}); answering EIO", m.0);
                if n >= abi::IN_HEADER {
                    let unique = u64::from_ne_bytes(buf[8..16].try_into().unwrap());
                    Reply::new(unique, chan.clone(), pending.clone()).error(libc::EIO);
                }
            }
        }
    }
    // The connection is over: every reader stops.
    gone.store(true, Relaxed);
    stop.stop();
}
