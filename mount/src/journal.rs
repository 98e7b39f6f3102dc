//! What a successor needs to serve a live kernel connection: the INIT agreed, the
//! inode numbers the kernel may name (with the path each stands for), the page
//! cache's version per inode, every open handle with the version it pinned, and
//! the passthrough backing files registered.
//!
//! The serving process appends a record for each of these before the kernel can
//! learn of it (an inode before the reply that names it, a handle before the
//! open's reply), to a memory file the mount's keeper holds, so the records
//! outlive the process whatever kills it. Each record is checksummed; a torn last
//! one (the writer killed mid-write) is cut off. A successor replays them and
//! writes the live state, compacted, to a fresh file. It costs one `write` per new
//! inode or handle, and about 40 bytes plus the path per inode, kept in RAM.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shoal::store::ObjectMeta;

use crate::kernel::Negotiated;

/// One thing the kernel was told.
#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    Agreed(Negotiated),
    Inode {
        ino: u64,
        dir: bool,
        path: String,
    },
    /// The version whose bytes the kernel's page cache holds for `ino`.
    PageVersion {
        ino: u64,
        etag: String,
    },
    File {
        fh: u64,
        ino: u64,
        meta: ObjectMeta,
    },
    Dir {
        fh: u64,
        ino: u64,
    },
    Closed {
        fh: u64,
    },
    /// Handle `fh` of `ino` registered with passthrough: through a backing file or
    /// the daemon.
    Passed {
        fh: u64,
        ino: u64,
        backed: bool,
    },
    Backing {
        ino: u64,
        id: u32,
        etag: String,
    },
    BackingGone {
        ino: u64,
    },
}

/// The live state the records add up to.
#[derive(Debug, Default)]
pub struct State {
    pub agreed: Option<Negotiated>,
    /// In the order handed out: (inode, whether a directory, path); the latest
    /// inode of a path is its current one.
    pub inodes: Vec<(u64, bool, String)>,
    pub page_versions: HashMap<u64, String>,
    pub files: HashMap<u64, (u64, ObjectMeta)>,
    pub dirs: HashMap<u64, u64>,
    pub passed: HashMap<u64, (u64, bool)>,
    pub backings: HashMap<u64, (u32, String)>,
}

impl State {
    fn apply(&mut self, r: Record) {
        match r {
            Record::Agreed(n) => self.agreed = Some(n),
            Record::Inode { ino, dir, path } => self.inodes.push((ino, dir, path)),
            Record::PageVersion { ino, etag } => {
                self.page_versions.insert(ino, etag);
            }
            Record::File { fh, ino, meta } => {
                self.files.insert(fh, (ino, meta));
            }
            Record::Dir { fh, ino } => {
                self.dirs.insert(fh, ino);
            }
            Record::Closed { fh } => {
                self.files.remove(&fh);
                self.dirs.remove(&fh);
                self.passed.remove(&fh);
            }
            Record::Passed { fh, ino, backed } => {
                self.passed.insert(fh, (ino, backed));
            }
            Record::Backing { ino, id, etag } => {
                self.backings.insert(ino, (id, etag));
            }
            Record::BackingGone { ino } => {
                self.backings.remove(&ino);
            }
        }
    }

    /// The records that make this state again, and nothing else.
    pub fn records(&self) -> Vec<Record> {
        let mut out = Vec::new();
        out.extend(self.agreed.map(Record::Agreed));
        out.extend(self.inodes.iter().map(|(ino, dir, path)| Record::Inode {
            ino: *ino,
            dir: *dir,
            path: path.clone(),
        }));
        for (ino, etag) in &self.page_versions {
            out.push(Record::PageVersion {
                ino: *ino,
                etag: etag.clone(),
            });
        }
        for (ino, (id, etag)) in &self.backings {
            out.push(Record::Backing {
                ino: *ino,
                id: *id,
                etag: etag.clone(),
            });
        }
        for (fh, (ino, meta)) in &self.files {
            out.push(Record::File {
                fh: *fh,
                ino: *ino,
                meta: meta.clone(),
            });
        }
        for (fh, ino) in &self.dirs {
            out.push(Record::Dir { fh: *fh, ino: *ino });
        }
        for (fh, (ino, backed)) in &self.passed {
            out.push(Record::Passed {
                fh: *fh,
                ino: *ino,
                backed: *backed,
            });
        }
        out
    }

    /// The highest handle number in use.
    pub fn last_fh(&self) -> u64 {
        let files = self.files.keys().chain(self.dirs.keys());
        files.chain(self.passed.keys()).copied().max().unwrap_or(0)
    }
}

/// The records of one mount, in the memory file its keeper holds.
pub struct Journal {
    file: Mutex<File>,
    failed: std::sync::atomic::AtomicBool,
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
        Ok(Journal::from_fd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The memory file itself (for the keeper to hold).
    pub fn into_fd(self) -> OwnedFd {
        self.file.into_inner().unwrap().into()
    }

    pub fn from_fd(fd: OwnedFd) -> Journal {
        Journal {
            file: Mutex::new(File::from(fd)),
            failed: false.into(),
        }
    }

    /// Writes go to `other`'s file from now on (a compacted successor of this one).
    pub fn replace_with(&self, other: Journal) {
        let fresh = other.file.into_inner().unwrap();
        *self.file.lock().unwrap() = fresh;
    }

    pub fn file(&self) -> std::sync::MutexGuard<'_, File> {
        self.file.lock().unwrap()
    }

    /// Appends `r` in one write.
    pub fn append(&self, r: &Record) {
        let buf = frame(r);
        let mut f = self.file.lock().unwrap();
        let res = f.seek(io::SeekFrom::End(0)).and_then(|_| f.write_all(&buf));
        if let Err(e) = res {
            if !self.failed.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::error!("cannot keep the mount's state ({e}): a restart of this daemon would lose its open files");
            }
        }
    }

    /// Every record from the start, up to a torn or damaged one.
    pub fn replay(&self) -> io::Result<State> {
        let mut f = self.file.lock().unwrap();
        f.seek(io::SeekFrom::Start(0))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        let mut state = State::default();
        let mut at = 0;
        while let Some((r, next)) = unframe(&buf, at) {
            state.apply(r);
            at = next;
        }
        if at < buf.len() {
            tracing::warn!(
                "the mount's state ends in {} bytes that do not read as a record (a write cut short); left out",
                buf.len() - at
            );
        }
        Ok(state)
    }

    /// A fresh memory file holding just `state`.
    pub fn compacted(state: &State) -> io::Result<Journal> {
        let j = Journal::create()?;
        let mut buf = Vec::new();
        for r in state.records() {
            buf.extend_from_slice(&frame(&r));
        }
        j.file.lock().unwrap().write_all(&buf)?;
        Ok(j)
    }
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&(s.len() as u32).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
}

fn encode(r: &Record) -> Vec<u8> {
    let mut b = Vec::new();
    let u64s = |b: &mut Vec<u8>, vs: &[u64]| {
        for v in vs {
            b.extend_from_slice(&v.to_le_bytes());
        }
    };
    match r {
        Record::Agreed(n) => {
            b.push(b'N');
            u64s(&mut b, &[n.minor as u64, n.flags, n.offered]);
        }
        Record::Inode { ino, dir, path } => {
            b.push(b'I');
            u64s(&mut b, &[*ino, *dir as u64]);
            put_str(&mut b, path);
        }
        Record::PageVersion { ino, etag } => {
            b.push(b'P');
            u64s(&mut b, &[*ino]);
            put_str(&mut b, etag);
        }
        Record::File { fh, ino, meta } => {
            b.push(b'F');
            let mtime = meta
                .last_modified
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(u64::MAX, |d| d.as_nanos() as u64);
            u64s(&mut b, &[*fh, *ino, meta.size, mtime]);
            put_str(&mut b, &meta.etag);
        }
        Record::Dir { fh, ino } => {
            b.push(b'D');
            u64s(&mut b, &[*fh, *ino]);
        }
        Record::Closed { fh } => {
            b.push(b'C');
            u64s(&mut b, &[*fh]);
        }
        Record::Passed { fh, ino, backed } => {
            b.push(b'T');
            u64s(&mut b, &[*fh, *ino, *backed as u64]);
        }
        Record::Backing { ino, id, etag } => {
            b.push(b'B');
            u64s(&mut b, &[*ino, *id as u64]);
            put_str(&mut b, etag);
        }
        Record::BackingGone { ino } => {
            b.push(b'b');
            u64s(&mut b, &[*ino]);
        }
    }
    b
}

/// A record as written: its length, a checksum, then the record.
fn frame(r: &Record) -> Vec<u8> {
    let body = encode(r);
    let mut out = Vec::with_capacity(body.len() + 8);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&(xxhash_rust::xxh3::xxh3_64(&body) as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn u64(&mut self) -> Option<u64> {
        let (a, b) = self.0.split_at_checked(8)?;
        self.0 = b;
        Some(u64::from_le_bytes(a.try_into().ok()?))
    }
    fn string(&mut self) -> Option<String> {
        let (n, rest) = self.0.split_at_checked(4)?;
        let n = u32::from_le_bytes(n.try_into().ok()?) as usize;
        let (s, rest) = rest.split_at_checked(n)?;
        self.0 = rest;
        String::from_utf8(s.to_vec()).ok()
    }
}

/// The record at `at` and where the next one starts, if it is whole and intact.
fn unframe(buf: &[u8], at: usize) -> Option<(Record, usize)> {
    let head = buf.get(at..at + 8)?;
    let len = u32::from_le_bytes(head[..4].try_into().ok()?) as usize;
    let sum = u32::from_le_bytes(head[4..].try_into().ok()?);
    let body = buf.get(at + 8..at + 8 + len)?;
    if xxhash_rust::xxh3::xxh3_64(body) as u32 != sum || body.is_empty() {
        return None;
    }
    let mut f = Fields(&body[1..]);
    let r = match body[0] {
        b'N' => Record::Agreed(Negotiated {
            minor: f.u64()? as u32,
            flags: f.u64()?,
            offered: f.u64()?,
        }),
        b'I' => Record::Inode {
            ino: f.u64()?,
            dir: f.u64()? == 1,
            path: f.string()?,
        },
        b'P' => Record::PageVersion {
            ino: f.u64()?,
            etag: f.string()?,
        },
        b'F' => {
            let (fh, ino, size, mtime) = (f.u64()?, f.u64()?, f.u64()?, f.u64()?);
            Record::File {
                fh,
                ino,
                meta: ObjectMeta {
                    size,
                    etag: f.string()?,
                    last_modified: (mtime != u64::MAX)
                        .then(|| SystemTime::UNIX_EPOCH + Duration::from_nanos(mtime)),
                    ..Default::default()
                },
            }
        }
        b'D' => Record::Dir {
            fh: f.u64()?,
            ino: f.u64()?,
        },
        b'C' => Record::Closed { fh: f.u64()? },
        b'T' => Record::Passed {
            fh: f.u64()?,
            ino: f.u64()?,
            backed: f.u64()? == 1,
        },
        b'B' => Record::Backing {
            ino: f.u64()?,
            id: f.u64()? as u32,
            etag: f.string()?,
        },
        b'b' => Record::BackingGone { ino: f.u64()? },
        _ => return None,
    };
    Some((r, at + 8 + len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_replay_compact_and_a_torn_tail_is_cut() {
        let j = Journal::create().unwrap();
        let meta = ObjectMeta {
            size: 10,
            etag: "e1".into(),
            last_modified: Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
            ..Default::default()
        };
        let agreed = Negotiated {
            minor: 40,
            flags: 1 << 13,
            offered: 1 << 39,
        };
        for r in [
            Record::Agreed(agreed),
            Record::Inode {
                ino: 2,
                dir: true,
                path: "d/".into(),
            },
            Record::Inode {
                ino: 3,
                dir: false,
                path: "d/f\nodd".into(),
            },
            Record::PageVersion {
                ino: 3,
                etag: "e1".into(),
            },
            Record::File {
                fh: 7,
                ino: 3,
                meta: meta.clone(),
            },
            Record::Dir { fh: 8, ino: 2 },
            Record::Passed {
                fh: 7,
                ino: 3,
                backed: true,
            },
            Record::Backing {
                ino: 3,
                id: 1,
                etag: "e1".into(),
            },
            Record::File {
                fh: 9,
                ino: 3,
                meta: meta.clone(),
            },
            Record::Closed { fh: 9 },
        ] {
            j.append(&r);
        }
        // A writer killed mid-record leaves part of one.
        let torn = frame(&Record::Closed { fh: 7 });
        j.file().write_all(&torn[..torn.len() - 3]).unwrap();
        let s = j.replay().unwrap();
        assert_eq!(s.agreed, Some(agreed));
        assert_eq!(s.inodes.len(), 2);
        assert_eq!(s.inodes[1].2, "d/f\nodd");
        assert_eq!(s.files.get(&7), Some(&(3, meta)));
        assert!(!s.files.contains_key(&9), "closed");
        assert_eq!(s.dirs.get(&8), Some(&2));
        assert_eq!(s.passed.get(&7), Some(&(3, true)));
        assert_eq!(s.backings.get(&3), Some(&(1, "e1".into())));
        assert_eq!(s.last_fh(), 8);
        let again = Journal::compacted(&s).unwrap().replay().unwrap();
        assert_eq!(again.records().len(), s.records().len());
        assert_eq!(again.files, s.files);
        assert_eq!(again.inodes, s.inodes);
    }
}
