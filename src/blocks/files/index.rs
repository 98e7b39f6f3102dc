//! The on-disk format of a version's files: the index header that names the
//! version, the fixed-size checksummed records appended to it, the stamp of a
//! verified whole file, and what a version's index says is here.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use xxhash_rust::xxh3::{xxh3_128, xxh3_64};

use crate::blocks::BlockKey;

pub(super) const MAGIC: &[u8; 8] = b"SHOALOB1";
pub(super) const VERSION: u32 = 1;
/// index, a, b, c, d, checksum of the first five.
pub(super) const RECORD: usize = 48;
/// The record that stamps a verified whole file.
pub(super) const STAMP: u64 = u64::MAX;
/// The record that gives the object's size.
pub(super) const SIZE: u64 = u64::MAX - 1;

/// One version: which blocks are here.
pub(super) struct Version {
    pub(super) bucket: Arc<str>,
    pub(super) key: Arc<str>,
    pub(super) etag: Arc<str>,
    pub(super) block_size: u64,
    /// index -> (length, xxh3)
    pub(super) blocks: HashMap<u64, (u64, u64)>,
    pub(super) bytes: u64,
    pub(super) size: Option<u64>,
    pub(super) stamp: Option<Stamp>,
}

/// What identifies a data file's contents without reading them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Stamp {
    pub(super) len: u64,
    pub(super) ino: u64,
    pub(super) mtime_ns: u64,
    pub(super) ctime_ns: u64,
}

impl Stamp {
    pub(super) fn of(m: &fs::Metadata) -> Stamp {
        Stamp {
            len: m.len(),
            ino: m.ino(),
            mtime_ns: (m.mtime() as u64).wrapping_mul(1_000_000_000) + m.mtime_nsec() as u64,
            ctime_ns: (m.ctime() as u64).wrapping_mul(1_000_000_000) + m.ctime_nsec() as u64,
        }
    }
}

impl Version {
    /// A version of `key`'s object with no blocks yet.
    pub(super) fn of(key: &BlockKey) -> Version {
        Version {
            bucket: key.bucket.clone(),
            key: key.key.clone(),
            etag: key.etag.clone(),
            block_size: key.block_size,
            blocks: HashMap::new(),
            bytes: 0,
            size: None,
            stamp: None,
        }
    }

    /// Every block of a `size`-byte object is here, at its length.
    pub(super) fn complete(&self, size: u64) -> bool {
        let n = size.div_ceil(self.block_size);
        (0..n).all(|i| {
            let want = (size - i * self.block_size).min(self.block_size);
            self.blocks.get(&i).is_some_and(|&(len, _)| len == want)
        })
    }
}

pub(super) fn id_of(bucket: &str, key: &str, etag: &str, block_size: u64) -> u128 {
    let mut buf = Vec::with_capacity(32 + bucket.len() + key.len() + etag.len());
    for part in [bucket.as_bytes(), key.as_bytes(), etag.as_bytes()] {
        buf.extend_from_slice(&(part.len() as u32).to_le_bytes());
        buf.extend_from_slice(part);
    }
    buf.extend_from_slice(&block_size.to_le_bytes());
    xxh3_128(&buf)
}

pub(super) fn record(index: u64, f: [u64; 4]) -> [u8; RECORD] {
    let mut r = [0u8; RECORD];
    r[..8].copy_from_slice(&index.to_le_bytes());
    for (i, v) in f.iter().enumerate() {
        r[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
    }
    let sum = xxh3_64(&r[..40]);
    r[40..].copy_from_slice(&sum.to_le_bytes());
    r
}

pub(super) fn header(v: &Version) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&VERSION.to_le_bytes());
    let parts = [v.bucket.as_bytes(), v.key.as_bytes(), v.etag.as_bytes()];
    let len = 8 + 4 + 4 + 8 + parts.iter().map(|p| 4 + p.len()).sum::<usize>();
    h.extend_from_slice(&(len as u32).to_le_bytes());
    h.extend_from_slice(&v.block_size.to_le_bytes());
    for p in parts {
        h.extend_from_slice(&(p.len() as u32).to_le_bytes());
        h.extend_from_slice(p);
    }
    h
}

/// The version an index file describes, or why it is not one.
pub(super) fn parse_index(buf: &[u8]) -> Result<(Version, usize), &'static str> {
    let u32_at =
        |i: usize| -> Option<u32> { Some(u32::from_le_bytes(buf.get(i..i + 4)?.try_into().ok()?)) };
    let u64_at =
        |i: usize| -> Option<u64> { Some(u64::from_le_bytes(buf.get(i..i + 8)?.try_into().ok()?)) };
    if buf.get(..8) != Some(MAGIC) {
        return Err("not a shoal object index");
    }
    if u32_at(8) != Some(VERSION) {
        return Err("another index version");
    }
    let hlen = u32_at(12).ok_or("short")? as usize;
    let block_size = u64_at(16).ok_or("short")?;
    if hlen > buf.len() || hlen > 64 * 1024 || block_size == 0 {
        return Err("bad header");
    }
    let mut at = 24;
    let mut parts = Vec::new();
    for _ in 0..3 {
        let n = u32_at(at).ok_or("short")? as usize;
        at += 4;
        let s = buf.get(at..at + n).ok_or("short")?;
        parts.push(std::str::from_utf8(s).map_err(|_| "not UTF-8")?.to_owned());
        at += n;
    }
    if at != hlen {
        return Err("bad header length");
    }
    let mut v = Version {
        bucket: parts[0].as_str().into(),
        key: parts[1].as_str().into(),
        etag: parts[2].as_str().into(),
        block_size,
        blocks: HashMap::new(),
        bytes: 0,
        size: None,
        stamp: None,
    };
    let mut good = hlen;
    for r in buf[hlen..].chunks(RECORD) {
        if r.len() < RECORD || xxh3_64(&r[..40]).to_le_bytes() != r[40..] {
            break;
        }
        let f = |i: usize| u64::from_le_bytes(r[8 + 8 * i..16 + 8 * i].try_into().unwrap());
        let index = u64::from_le_bytes(r[..8].try_into().unwrap());
        match index {
            STAMP => {
                v.stamp = Some(Stamp {
                    len: f(0),
                    ino: f(1),
                    mtime_ns: f(2),
                    ctime_ns: f(3),
                })
            }
            SIZE => v.size = Some(f(0)),
            i if f(0) == 0 => {
                if let Some((len, _)) = v.blocks.remove(&i) {
                    v.bytes -= len;
                }
                v.stamp = None;
            }
            i => {
                if let Some((old, _)) = v.blocks.insert(i, (f(0), f(1))) {
                    v.bytes -= old;
                }
                v.bytes += f(0);
                v.stamp = None;
            }
        }
        good += RECORD;
    }
    Ok((v, good))
}
