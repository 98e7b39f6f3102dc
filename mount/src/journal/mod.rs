//! What a successor needs to serve a live kernel connection: the INIT agreed, the
//! inode numbers the kernel may name (with the path each stands for), the page
//! cache's version per inode, every open handle with the version it pinned, and
//! the passthrough backing files registered.
//!
//! The serving process appends a record ([`record`]) for each of these before
//! the kernel can learn of it (an inode before the reply that names it, a handle
//! before the open's reply) to a memory file the mount's keeper holds, so the
//! records outlive the process whatever kills it. A successor replays them
//! ([`replay`]) into a [`State`].
//!
//! One memory file serves the mount for its whole life: the keeper's, and the
//! copy a CSI driver keeps to start another keeper, are always the journal in
//! use. It is compacted in place, as it goes: once its live region has grown past
//! twice its last snapshot (plus some slack), the live state is written after it
//! as a snapshot, the header is pointed at that, the snapshot is copied to the
//! front and the file cut after it. So its size follows the live inodes and
//! handles, not the opens ever made.
//!
//! What a kill can leave, and why it is safe:
//! - A record is appended with one `write`; a write that crosses a page can be
//!   cut short by SIGKILL, so the last record may be torn. That is the one damage
//!   a crash makes, and only at the end: a replay leaves it out, and a successor
//!   cuts it off before it appends.
//! - The header is changed by one 16-byte write inside the first page, which the
//!   kernel copies whole (a signal is acted on between pages, never within a
//!   copy): it names either the old records or the new, never neither.
//! - A snapshot is bounded by begin and end records; one without its end is a
//!   torn write and counts for nothing, one with it replaces what came before, so
//!   a kill between writing it and pointing the header at it loses nothing.
//!
//! Anything else that is not a record (a bad checksum, an unknown kind, a length
//! no record has, an inode number handed out twice, a handle on an inode never
//! named) fails the replay: a successor refuses to serve rather than serve part
//! of the state, with inode numbers the kernel still holds handed out again.

mod record;
mod replay;
mod state;

use std::fs::File;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

pub use record::{Bad, Record};
pub use replay::{replay, ReplayError, Replayed};
pub use state::State;

use record::{frame_into, FRAME_HEAD, MAX_BODY};
use replay::{header_bytes, HEADER_LEN};

/// Growth past twice the last snapshot allowed before compacting again: small
/// journals are not compacted at every few records.
const SLACK: usize = 64 << 10;

/// The records of one mount, in the memory file its keeper holds.
pub struct Journal {
    inner: Mutex<Inner>,
}

struct Inner {
    file: File,
    /// The live records: from `start` to `end`, where the next one goes.
    start: usize,
    end: usize,
    /// The size of the last snapshot: the live state's, then.
    snapshot: usize,
    /// Bytes of records since the last snapshot that a later record can make
    /// dead (handles, page versions): an inode's record never dies, so a
    /// journal grown by inodes alone has nothing a compaction would drop.
    transient: usize,
    /// An append failed: told once.
    failed: bool,
}

impl Journal {
    /// A new, empty memory file for a new mount.
    pub fn create() -> io::Result<Journal> {
        let name = c"shoal-mount-state";
        // SAFETY: memfd_create with a NUL-terminated name.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor just made, owned from here.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        file.write_all_at(&header_bytes(HEADER_LEN as u64, 0), 0)?;
        Ok(Journal::with(file, HEADER_LEN, HEADER_LEN, 0))
    }

    fn with(file: File, start: usize, end: usize, snapshot: usize) -> Journal {
        Journal {
            inner: Mutex::new(Inner {
                file,
                start,
                end,
                snapshot,
                transient: 0,
                failed: false,
            }),
        }
    }

    /// The memory file itself (for the keeper to hold).
    pub fn into_fd(self) -> OwnedFd {
        self.inner.into_inner().unwrap().file.into()
    }

    /// Takes over the journal in `fd`: replays it, cuts off a torn last record,
    /// and compacts it in place. Fails, touching nothing, if any record is damaged.
    pub fn open(fd: OwnedFd) -> Result<(Journal, State), ReplayError> {
        let file = File::from(fd);
        let buf = read_all(&file)?;
        let r = replay(&buf)?;
        if r.torn > 0 {
            tracing::warn!(
                "the mount's journal ends in a record cut short ({} bytes, its writer killed as it wrote): left out",
                r.torn
            );
        }
        let mut inner = Inner {
            file,
            start: r.start,
            end: r.end,
            snapshot: 0,
            transient: 0,
            failed: false,
        };
        if r.headerless && r.state.is_empty() {
            // Nothing to keep: a fresh header over nothing.
            inner.file.set_len(0)?;
            inner
                .file
                .write_all_at(&header_bytes(HEADER_LEN as u64, 0), 0)?;
            (inner.start, inner.end) = (HEADER_LEN, HEADER_LEN);
        } else {
            inner.file.set_len(r.end as u64)?;
            if !r.headerless && buf.len() > r.end {
                // A header that stopped the records short of the file's end.
                inner.set_header(r.start, 0)?;
            }
            if !r.state.is_empty() {
                inner.compact(&r.state, r.headerless)?;
            }
        }
        Ok((
            Journal {
                inner: Mutex::new(inner),
            },
            r.state,
        ))
    }

    /// Appends `r` in one write; compacts the journal if it has grown enough.
    pub fn append(&self, r: &Record) {
        self.append_all(std::slice::from_ref(r))
    }

    /// Appends `rs` in one write (a listing's new inodes cost one, not one
    /// each); compacts the journal if it has grown enough.
    pub fn append_all(&self, rs: &[Record]) {
        if rs.is_empty() {
            return;
        }
        let mut buf = Vec::new();
        let mut res = Ok(());
        let mut transient = 0;
        for r in rs {
            let at = buf.len();
            frame_into(&mut buf, r);
            if buf.len() - at - FRAME_HEAD > MAX_BODY {
                res = Err(io::Error::other(format!(
                    "a record of {} bytes, past the most a replay takes",
                    buf.len() - at
                )));
                break;
            }
            if !matches!(r, Record::Inode { .. }) {
                transient += buf.len() - at;
            }
        }
        let mut j = self.inner.lock().unwrap();
        let res = res.and_then(|()| j.write_at_end(&buf));
        if let Err(e) = res {
            if !std::mem::replace(&mut j.failed, true) {
                tracing::error!("cannot keep the mount's state ({e}): a restart of this daemon would lose its open files");
            }
            return;
        }
        j.transient += transient;
        // Compacted once at least half of what it holds may be dead: each
        // compaction is paid for by as many bytes of such records, and the
        // journal stays within twice its live state (plus the slack).
        let live = j.end - j.start;
        if live > 2 * j.snapshot + SLACK && j.transient > live / 2 {
            if let Err(e) = j.compact_live() {
                tracing::warn!("cannot compact the mount's journal ({e}); it grows until it can");
            }
        }
    }

    /// The journal's bytes from its start (for its tests, and to look at).
    pub fn bytes(&self) -> io::Result<Vec<u8>> {
        let j = self.inner.lock().unwrap();
        let mut buf = vec![0; j.end];
        j.file.read_exact_at(&mut buf, 0)?;
        Ok(buf)
    }

    /// A new memory file holding just `state`.
    pub fn compacted(state: &State) -> io::Result<Journal> {
        let j = Journal::create()?;
        j.inner.lock().unwrap().compact(state, false)?;
        Ok(j)
    }
}

impl Inner {
    /// Writes `buf` after the last record; a write cut short is taken back.
    fn write_at_end(&mut self, buf: &[u8]) -> io::Result<()> {
        if let Err(e) = self.file.write_all_at(buf, self.end as u64) {
            // Part of it may be there: cut it off, so that the next record does
            // not follow a damaged one.
            self.file.set_len(self.end as u64)?;
            return Err(e);
        }
        self.end += buf.len();
        Ok(())
    }

    /// Points the header at records from `start` to `stop` (0: to the end).
    fn set_header(&self, start: usize, stop: usize) -> io::Result<()> {
        let h = header_bytes(start as u64, stop as u64);
        // One write within the first page: whole or not at all.
        self.file.write_all_at(&h[8..], 8)
    }

    /// Compacts what this process wrote: read back and replayed.
    fn compact_live(&mut self) -> io::Result<()> {
        let mut buf = vec![0; self.end];
        self.file.read_exact_at(&mut buf, 0)?;
        let r = replay(&buf).map_err(|e| io::Error::other(format!("its own records: {e}")))?;
        self.compact(&r.state, false)
    }

    /// Makes `state`, as one snapshot, the whole journal: written after the last
    /// record, the header pointed at it, then moved to the front if it fits
    /// before where it was written, and the file cut after it. A kill at any
    /// step leaves a journal that replays to `state`.
    fn compact(&mut self, state: &State, headerless: bool) -> io::Result<()> {
        let mut snap = Vec::new();
        frame_into(&mut snap, &Record::SnapshotBegin);
        for r in state.records() {
            frame_into(&mut snap, &r);
        }
        frame_into(&mut snap, &Record::SnapshotEnd);
        // A journal without a header gets one over its first bytes: those must
        // be records the snapshot replaces, not the snapshot itself.
        let at = self.end.max(HEADER_LEN);
        let old = self.end;
        self.end = at;
        if let Err(e) = self.write_at_end(&snap) {
            self.end = old;
            return Err(e);
        }
        if headerless {
            self.file.write_all_at(&header_bytes(at as u64, 0), 0)?;
        } else {
            self.set_header(at, 0)?;
        }
        self.start = at;
        if at >= HEADER_LEN + snap.len() {
            self.file.write_all_at(&snap, HEADER_LEN as u64)?;
            // The copy, and only it: what follows it is the old records and the
            // first copy, until the file is cut.
            self.set_header(HEADER_LEN, HEADER_LEN + snap.len())?;
            self.file.set_len((HEADER_LEN + snap.len()) as u64)?;
            self.set_header(HEADER_LEN, 0)?;
            (self.start, self.end) = (HEADER_LEN, HEADER_LEN + snap.len());
        }
        self.snapshot = snap.len();
        self.transient = 0;
        Ok(())
    }
}

/// The whole file, read from its start whatever the offset its other holders
/// share is at.
fn read_all(file: &File) -> io::Result<Vec<u8>> {
    let mut buf = vec![0; file.metadata()?.len() as usize];
    file.read_exact_at(&mut buf, 0)?;
    Ok(buf)
}

#[cfg(test)]
mod tests;
