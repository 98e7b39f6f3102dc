//! One record as it is written: its body's length (`u32`), the low 32 bits of
//! the body's xxh3 (`u32`), then the body: a kind byte and its fields, integers
//! as little-endian `u64`, strings as a `u32` length and UTF-8 bytes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shoal::store::ObjectMeta;

use crate::kernel::Negotiated;

/// The length and checksum before each body.
pub(super) const FRAME_HEAD: usize = 8;
/// The longest body written or read. A record holds at most a path (an S3 key
/// is at most 1,024 bytes) and an ETag: anything near this is damage.
pub(super) const MAX_BODY: usize = 1 << 20;

/// One thing the kernel was told, or the bounds of a snapshot.
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
    /// The records up to the next [`Record::SnapshotEnd`] are the whole state:
    /// what came before them no longer counts, once the end is there.
    SnapshotBegin,
    SnapshotEnd,
}

/// Why the bytes at some offset are not a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Bad {
    #[error("a body length of {0} bytes (1 to {MAX_BODY} are possible)")]
    Length(u64),
    #[error("its checksum does not match its bytes")]
    Checksum,
    #[error("an unknown kind {0:#04x}")]
    Kind(u8),
    #[error("its fields do not fill its length exactly")]
    Fields,
    #[error("a field out of range: {0}")]
    Range(&'static str),
    #[error("a path or ETag that is not UTF-8")]
    Utf8,
    #[error("{0}")]
    Contradicts(String),
}

/// Appends `r`, framed, to `out`.
pub(super) fn frame_into(out: &mut Vec<u8>, r: &Record) {
    let body = encode(r);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&checksum(&body).to_le_bytes());
    out.extend_from_slice(&body);
}

#[cfg(test)]
pub(super) fn frame(r: &Record) -> Vec<u8> {
    let mut out = Vec::new();
    frame_into(&mut out, r);
    out
}

fn checksum(body: &[u8]) -> u32 {
    xxhash_rust::xxh3::xxh3_64(body) as u32
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&(s.len() as u32).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
}

fn put_u64s(b: &mut Vec<u8>, vs: &[u64]) {
    for v in vs {
        b.extend_from_slice(&v.to_le_bytes());
    }
}

fn encode(r: &Record) -> Vec<u8> {
    let mut b = Vec::new();
    match r {
        Record::Agreed(n) => {
            b.push(b'N');
            put_u64s(&mut b, &[n.minor as u64, n.flags, n.offered]);
        }
        Record::Inode { ino, dir, path } => {
            b.push(b'I');
            put_u64s(&mut b, &[*ino, *dir as u64]);
            put_str(&mut b, path);
        }
        Record::PageVersion { ino, etag } => {
            b.push(b'P');
            put_u64s(&mut b, &[*ino]);
            put_str(&mut b, etag);
        }
        Record::File { fh, ino, meta } => {
            b.push(b'F');
            let mtime = meta
                .last_modified
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(u64::MAX, |d| d.as_nanos().min(u64::MAX as u128 - 1) as u64);
            put_u64s(&mut b, &[*fh, *ino, meta.size, mtime]);
            put_str(&mut b, &meta.etag);
        }
        Record::Dir { fh, ino } => {
            b.push(b'D');
            put_u64s(&mut b, &[*fh, *ino]);
        }
        Record::Closed { fh } => {
            b.push(b'C');
            put_u64s(&mut b, &[*fh]);
        }
        Record::Passed { fh, ino, backed } => {
            b.push(b'T');
            put_u64s(&mut b, &[*fh, *ino, *backed as u64]);
        }
        Record::Backing { ino, id, etag } => {
            b.push(b'B');
            put_u64s(&mut b, &[*ino, *id as u64]);
            put_str(&mut b, etag);
        }
        Record::BackingGone { ino } => {
            b.push(b'b');
            put_u64s(&mut b, &[*ino]);
        }
        Record::SnapshotBegin => b.push(b'S'),
        Record::SnapshotEnd => b.push(b'E'),
    }
    b
}

/// What the bytes at an offset are.
pub(super) enum Framed {
    /// A whole, intact record, and where the next one starts.
    Record(Record, usize),
    /// The start of a record whose bytes end before it does: a write cut short.
    Torn,
    Bad(Bad),
}

/// The record at `at` (`at` < `buf.len()`).
pub(super) fn unframe(buf: &[u8], at: usize) -> Framed {
    let rest = &buf[at..];
    let Some(head) = rest.get(..FRAME_HEAD) else {
        return Framed::Torn;
    };
    let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
    let sum = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
    // A torn write leaves a prefix of what was meant: its length is whole and
    // right, so a length no record has is damage wherever it is.
    if len == 0 || len > MAX_BODY {
        return Framed::Bad(Bad::Length(len as u64));
    }
    let Some(body) = rest.get(FRAME_HEAD..FRAME_HEAD + len) else {
        return Framed::Torn;
    };
    if checksum(body) != sum {
        return Framed::Bad(Bad::Checksum);
    }
    match decode(body) {
        Ok(r) => Framed::Record(r, at + FRAME_HEAD + len),
        Err(b) => Framed::Bad(b),
    }
}

struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn u64(&mut self) -> Result<u64, Bad> {
        let (a, b) = self.0.split_at_checked(8).ok_or(Bad::Fields)?;
        self.0 = b;
        Ok(u64::from_le_bytes(a.try_into().expect("8 bytes")))
    }
    fn flag(&mut self, what: &'static str) -> Result<bool, Bad> {
        match self.u64()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Bad::Range(what)),
        }
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, Bad> {
        u32::try_from(self.u64()?).map_err(|_| Bad::Range(what))
    }
    fn string(&mut self) -> Result<String, Bad> {
        let (n, rest) = self.0.split_at_checked(4).ok_or(Bad::Fields)?;
        let n = u32::from_le_bytes(n.try_into().expect("4 bytes")) as usize;
        let (s, rest) = rest.split_at_checked(n).ok_or(Bad::Fields)?;
        self.0 = rest;
        String::from_utf8(s.to_vec()).map_err(|_| Bad::Utf8)
    }
}

fn decode(body: &[u8]) -> Result<Record, Bad> {
    let mut f = Fields(&body[1..]);
    let r = match body[0] {
        b'N' => Record::Agreed(Negotiated {
            minor: f.u32("the protocol's minor version")?,
            flags: f.u64()?,
            offered: f.u64()?,
        }),
        b'I' => Record::Inode {
            ino: f.u64()?,
            dir: f.flag("an inode's kind")?,
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
            backed: f.flag("a passthrough handle's kind")?,
        },
        b'B' => Record::Backing {
            ino: f.u64()?,
            id: f.u32("a backing file's id")?,
            etag: f.string()?,
        },
        b'b' => Record::BackingGone { ino: f.u64()? },
        b'S' => Record::SnapshotBegin,
        b'E' => Record::SnapshotEnd,
        k => return Err(Bad::Kind(k)),
    };
    if !f.0.is_empty() {
        return Err(Bad::Fields);
    }
    Ok(r)
}
