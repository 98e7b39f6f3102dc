//! Blocks found by name while the index scan runs: a block the index does not
//! know yet is read from the file its key names, checked as every read is, and
//! indexed, so a started node serves its disk at once and never fetches a block
//! whose file it has. A file found bad is treated as the scan treats it.

use std::fs;
use std::io;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;

use super::{decode_block, layout, DecodeError, DiskTier};
use crate::blocks::BlockKey;
use crate::log_limit::more;

impl DiskTier {
    /// `key`'s block from its file, if the scan is still running and the file
    /// is there and sound; it is in the index after.
    pub(super) fn on_demand(&self, key: &BlockKey) -> Option<Bytes> {
        let purged = {
            let s = self.state.lock().unwrap();
            s.indexing.as_ref()?.purged(key)
        };
        let path = self.path_of(key);
        if purged {
            let _ = fs::remove_file(&path);
            return None;
        }
        let buf = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => {
                self.read_failures.fetch_add(1, Relaxed);
                if let Some(n) = self.read_log.event() {
                    tracing::warn!(
                        path = %path.display(),
                        "disk tier cannot read a block, fetching it instead: {e}{}",
                        more(n)
                    );
                }
                return None;
            }
        };
        match decode_block(&buf, key) {
            Ok(data) => {
                let data = Bytes::copy_from_slice(data);
                self.found(key, buf.len() as u64).then_some(data)
            }
            // Another block's file under this one's name: the scan indexes it
            // by its own header, as it would have.
            Err(DecodeError::OtherBlock) => None,
            // A sound header over bad data: the scan would index it and the
            // first read drop it.
            Err(DecodeError::Checksum) => {
                self.checksum_failures.fetch_add(1, Relaxed);
                tracing::warn!(path = %path.display(), "dropping bad block file: checksum mismatch");
                self.forget(key);
                None
            }
            // Not a block file of this format, or torn: the scan deletes it.
            Err(why) => {
                tracing::debug!(path = %path.display(), "removing block file: {why}");
                self.removed_on_demand.fetch_add(1, Relaxed);
                self.forget(key);
                None
            }
        }
    }

    /// Whether `key`'s file is on disk (by its header) while the scan runs; it
    /// is in the index after. A block about to be written is so kept once.
    pub(super) fn adopt(&self, key: &BlockKey) -> bool {
        match layout::read_header(&self.path_of(key)) {
            Ok(b) if b.key == *key => self.found(key, b.len),
            _ => false,
        }
    }

    /// Indexes a file of `len` bytes found for `key`, unless a purge picked it
    /// meanwhile; counted once whoever finds it first.
    fn found(&self, key: &BlockKey, len: u64) -> bool {
        let mut s = self.state.lock().unwrap();
        if s.indexing.as_ref().is_some_and(|ix| ix.purged(key)) {
            return false;
        }
        // On disk from before the start: kept as the scan would keep it.
        if !s.index.contains(key) {
            s.index.insert_kept(key.clone(), len, len);
            s.bytes += len;
            self.evict(&mut s);
        }
        true
    }
}
