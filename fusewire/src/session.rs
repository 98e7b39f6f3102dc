//! A FUSE session: the INIT handshake (or, for a daemon taking over a live
//! connection, what an earlier one agreed), then reader threads that take
//! requests off the channel and hand each to the [`Filesystem`] with its typed
//! reply ([`crate::reply`]).
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
use super::reply::{
    ReplyAttr, ReplyData, ReplyDir, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyXattr,
};
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

    /// Whether a file opened with direct I/O can still be mapped (shared).
    pub fn direct_io_mmap(&self) -> bool {
        self.flags & init::DIRECT_IO_ALLOW_MMAP != 0
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

/// A filesystem: what the readers hand each request to, with the one answer
/// its operation can give. An answer may be sent now or later, from any thread.
/// Operations not overridden answer `ENOSYS` (the kernel then stops asking for
/// FLUSH, GETXATTR and the like); writes never reach it (`EROFS`).
pub trait Filesystem: Send + Sync + 'static {
    fn lookup(&self, _h: &Header, _name: &[u8], reply: ReplyEntry) {
        reply.error(libc::ENOSYS)
    }
    /// The kernel forgets `nlookup` lookups of `h.nodeid` (no answer).
    fn forget(&self, _h: &Header, _nlookup: u64) {}
    /// Several FORGETs at once: `(inode, nlookup)` each (no answer).
    fn batch_forget(&self, _h: &Header, _items: &[(u64, u64)]) {}
    fn getattr(&self, _h: &Header, reply: ReplyAttr) {
        reply.error(libc::ENOSYS)
    }
    /// `flags` are the `open(2)` flags.
    fn open(&self, _h: &Header, _flags: i32, reply: ReplyOpen) {
        reply.error(libc::ENOSYS)
    }
    /// `direct`: the reader opened the file `O_DIRECT`, so the page cache will
    /// not keep what this read returns (a kernel too old to say counts as so).
    fn read(
        &self,
        _h: &Header,
        _fh: u64,
        _offset: u64,
        _size: u32,
        _direct: bool,
        reply: ReplyData,
    ) {
        reply.error(libc::ENOSYS)
    }
    fn release(&self, _h: &Header, _fh: u64, reply: ReplyEmpty) {
        reply.ok()
    }
    fn opendir(&self, _h: &Header, reply: ReplyOpen) {
        reply.error(libc::ENOSYS)
    }
    /// `plus`: READDIRPLUS, each entry with its attributes ([`crate::DirBuf`]).
    fn readdir(
        &self,
        _h: &Header,
        _fh: u64,
        _offset: u64,
        _size: u32,
        _plus: bool,
        reply: ReplyDir,
    ) {
        reply.error(libc::ENOSYS)
    }
    fn releasedir(&self, _h: &Header, _fh: u64, reply: ReplyEmpty) {
        reply.ok()
    }
    fn statfs(&self, _h: &Header, reply: ReplyStatfs) {
        reply.error(libc::ENOSYS)
    }
    fn flush(&self, _h: &Header, reply: ReplyEmpty) {
        reply.error(libc::ENOSYS)
    }
    /// `size` 0 asks how large the value is.
    fn getxattr(&self, _h: &Header, _size: u32, reply: ReplyXattr) {
        reply.error(libc::ENOSYS)
    }
    /// `size` 0 asks how large the list is.
    fn listxattr(&self, _h: &Header, _size: u32, reply: ReplyXattr) {
        reply.error(libc::ENOSYS)
    }
    fn access(&self, _h: &Header, _mask: u32, reply: ReplyEmpty) {
        reply.error(libc::ENOSYS)
    }
}

/// What the readers do with each request: hand it to a filesystem, or refuse
/// it (a connection held while no filesystem can serve it).
trait Serve: Send + Sync + 'static {
    fn serve(&self, h: &Header, op: Op<'_>, chan: &Arc<Channel>, pending: &Arc<AtomicUsize>);
}

struct Served<F>(Arc<F>);

impl<F: Filesystem> Serve for Served<F> {
    fn serve(&self, h: &Header, op: Op<'_>, chan: &Arc<Channel>, pending: &Arc<AtomicUsize>) {
        let fs = &*self.0;
        macro_rules! reply {
            ($t:ident) => {
                $t::new(h.unique, chan.clone(), pending.clone())
            };
        }
        match op {
            Op::Lookup { name } => fs.lookup(h, name, reply!(ReplyEntry)),
            Op::Forget { nlookup } => fs.forget(h, nlookup),
            Op::BatchForget { items } => fs.batch_forget(h, &items),
            Op::Getattr => fs.getattr(h, reply!(ReplyAttr)),
            Op::Open { flags } => fs.open(h, flags, reply!(ReplyOpen)),
            Op::Read {
                fh,
                offset,
                size,
                direct,
            } => fs.read(h, fh, offset, size, direct, reply!(ReplyData)),
            Op::Release { fh } => fs.release(h, fh, reply!(ReplyEmpty)),
            Op::Opendir => fs.opendir(h, reply!(ReplyOpen)),
            Op::Readdir {
                fh,
                offset,
                size,
                plus,
            } => fs.readdir(h, fh, offset, size, plus, reply!(ReplyDir)),
            Op::Releasedir { fh } => fs.releasedir(h, fh, reply!(ReplyEmpty)),
            Op::Statfs => fs.statfs(h, reply!(ReplyStatfs)),
            Op::Flush => fs.flush(h, reply!(ReplyEmpty)),
            Op::Getxattr { size } => fs.getxattr(h, size, reply!(ReplyXattr)),
            Op::Listxattr { size } => fs.listxattr(h, size, reply!(ReplyXattr)),
            Op::Access { mask } => fs.access(h, mask, reply!(ReplyEmpty)),
            Op::Interrupt => {}
            Op::Write => reply!(ReplyEmpty).error(libc::EROFS),
            // A second INIT, or an operation a read-only filesystem does not do.
            Op::Init { .. } | Op::Unsupported => reply!(ReplyEmpty).error(libc::ENOSYS),
            // The read loop ends the session on it.
            Op::Destroy => reply!(ReplyEmpty).ok(),
        }
    }
}

struct Refusing(i32);

impl Serve for Refusing {
    fn serve(&self, h: &Header, op: Op<'_>, chan: &Arc<Channel>, pending: &Arc<AtomicUsize>) {
        if op.wants_reply() {
            ReplyEmpty::new(h.unique, chan.clone(), pending.clone()).error(self.0);
        }
    }
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
                    "the kernel speaks FUSE {major}.{minor}; this filesystem needs {}.{} or later",
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
    /// requests to `fs`.
    pub fn start<F: Filesystem>(
        chan: Arc<Channel>,
        fs: Arc<F>,
        readers: usize,
        clone: bool,
    ) -> io::Result<Running> {
        Running::serve(chan, Arc::new(Served(fs)), readers, clone)
    }

    /// One reader on `chan` failing every request with `errno` at once: a
    /// connection held while nothing can serve it, so no caller waits.
    pub fn refusing(chan: Arc<Channel>, errno: i32) -> io::Result<Running> {
        Running::serve(chan, Arc::new(Refusing(errno)), 1, false)
    }

    fn serve(
        chan: Arc<Channel>,
        handler: Arc<dyn Serve>,
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

fn read_loop(
    chan: &Arc<Channel>,
    handler: &dyn Serve,
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
                ReplyEmpty::new(h.unique, chan.clone(), pending.clone()).ok();
                break;
            }
            Ok((h, op)) => handler.serve(&h, op, chan, pending),
            Err(m) => {
                tracing::warn!("malformed FUSE request ({}); answering EIO", m.0);
                if n >= abi::IN_HEADER {
                    let unique = u64::from_ne_bytes(buf[8..16].try_into().unwrap());
                    ReplyEmpty::new(unique, chan.clone(), pending.clone()).error(libc::EIO);
                }
            }
        }
    }
    // The connection is over: every reader stops.
    gone.store(true, Relaxed);
    stop.stop();
}
