//! The index scan: every block file under a tier's `blocks` directory read for
//! its header, and what cannot be a block file of this format removed.
//!
//! The tier serves while it runs, so its own writes land beside it: a
//! temporary file is removed only if it is older than the tier (a process
//! before this one left it half written), never one this process (or a
//! successor taking the tier over) is writing.

use std::fs;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::SystemTime;

use super::layout::{read_header, OnDisk};

/// What a scan found.
#[derive(Debug, Default)]
pub struct Found {
    /// Block files whose headers read, in directory order.
    pub blocks: Vec<OnDisk>,
    /// Temporary, unreadable or foreign files deleted.
    pub removed: u64,
}

/// How a scan is watched and stopped while it runs.
pub struct Control<'a> {
    /// When the tier opened: temporary files from before are leftovers.
    pub opened: SystemTime,
    /// Block files read so far.
    pub read: &'a AtomicU64,
    pub stop: &'a AtomicBool,
    /// Told the length of every `BATCH` files read (what is left to read is
    /// that much smaller).
    pub progress: &'a dyn Fn(u64),
}

const BATCH: usize = 1024;

/// Reads the header of every file under `blocks`, deleting those that are not
/// block files of this format. `Interrupted` if stopped.
pub fn scan(blocks: &Path, ctl: &Control) -> io::Result<Found> {
    let mut found = Found::default();
    let (mut batch, mut batch_len) = (0, 0);
    for sub in fs::read_dir(blocks)? {
        let sub = sub?.path();
        if !sub.is_dir() {
            continue;
        }
        for f in fs::read_dir(&sub)? {
            if ctl.stop.load(Relaxed) {
                return Err(io::Error::new(
                    io::ErrorKind::Interrupted,
                    "index scan stopped",
                ));
            }
            let path = f?.path();
            let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
            if ext == "tmp" && !leftover(&path, ctl.opened) {
                continue;
            }
            match (ext == "blk").then(|| read_header(&path)) {
                Some(Ok(b)) => {
                    batch_len += b.len;
                    found.blocks.push(b);
                    ctl.read.fetch_add(1, Relaxed);
                }
                // Gone since it was listed (evicted, purged, dropped as bad).
                _ if !path.exists() => {}
                _ => {
                    let _ = fs::remove_file(&path);
                    found.removed += 1;
                }
            }
            batch += 1;
            if batch == BATCH {
                (ctl.progress)(batch_len);
                (batch, batch_len) = (0, 0);
            }
        }
    }
    (ctl.progress)(batch_len);
    Ok(found)
}

/// Whether the temporary file at `path` was left by a process before the one
/// that opened the tier at `opened`.
fn leftover(path: &Path, opened: SystemTime) -> bool {
    fs::metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t < opened)
}
