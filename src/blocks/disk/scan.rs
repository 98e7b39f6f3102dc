//! The index scan: every block file under a tier's `blocks` directory read for
//! its header, and what cannot be a block file of this format removed.

use std::fs;
use std::io;
use std::path::Path;

use super::layout::{read_header, OnDisk};

/// What a scan found.
#[derive(Debug, Default)]
pub struct Found {
    /// Block files whose headers read, in directory order.
    pub blocks: Vec<OnDisk>,
    /// Temporary, unreadable or foreign files deleted.
    pub removed: u64,
}

/// Reads the header of every file under `blocks`, deleting those that are not
/// block files of this format.
pub fn scan(blocks: &Path) -> io::Result<Found> {
    let mut found = Found::default();
    for sub in fs::read_dir(blocks)? {
        let sub = sub?.path();
        if !sub.is_dir() {
            continue;
        }
        for f in fs::read_dir(&sub)? {
            let path = f?.path();
            let block = path
                .extension()
                .is_some_and(|e| e == "blk")
                .then(|| read_header(&path).ok())
                .flatten();
            match block {
                Some(b) => found.blocks.push(b),
                None => {
                    let _ = fs::remove_file(&path);
                    found.removed += 1;
                }
            }
        }
    }
    Ok(found)
}
