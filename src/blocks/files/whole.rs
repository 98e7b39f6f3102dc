//! A version held whole, handed out as one file: verified once by reading every
//! block against its checksum, then stamped with the data file's identity, so that
//! later asks only compare that identity (a write to the file changes its ctime).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering::Relaxed;

use xxhash_rust::xxh3::xxh3_64;

use super::index::{id_of, record, Stamp, SIZE, STAMP};
use super::FileTier;

impl FileTier {
    /// The data file of `bucket/key` at `etag`, open for reading, if the tier
    /// holds every block of its `size` bytes and they are verified. The first
    /// call for a complete version verifies it (reads it all); later ones only
    /// compare the file's identity with the stamp that verification left.
    pub fn whole(
        &self,
        bucket: &str,
        key: &str,
        etag: &str,
        block_size: u64,
        size: u64,
    ) -> Option<File> {
        let id = id_of(bucket, key, etag, block_size);
        let path = self.path_of(id).with_extension("data");
        let stamp = {
            let mut s = self.state.lock().unwrap();
            let v = s.versions.get_mut(&id)?;
            if v.size.is_none() {
                v.size = Some(size);
                drop(s);
                let _ = self.append(id, record(SIZE, [size, 0, 0, 0]));
                s = self.state.lock().unwrap();
            }
            let v = s.versions.peek(&id)?;
            if !v.complete(size) {
                return None;
            }
            v.stamp
        };
        let file = File::open(&path).ok()?;
        let now = Stamp::of(&file.metadata().ok()?);
        if stamp == Some(now) && now.len == size {
            return Some(file);
        }
        self.verify(id, &file, size).then_some(file)
    }

    /// Reads a complete version through, checking every block; stamps it if all
    /// are good, drops the bad ones otherwise.
    fn verify(&self, id: u128, file: &File, size: u64) -> bool {
        let (bs, blocks) = {
            let s = self.state.lock().unwrap();
            let Some(v) = s.versions.peek(&id) else {
                return false;
            };
            (v.block_size, v.blocks.clone())
        };
        let before = match file.metadata() {
            Ok(m) => Stamp::of(&m),
            Err(_) => return false,
        };
        if before.len < size {
            return false;
        }
        let mut buf = vec![0u8; bs as usize];
        let mut good = true;
        for i in 0..size.div_ceil(bs) {
            let Some(&(len, sum)) = blocks.get(&i) else {
                return false;
            };
            let b = &mut buf[..len as usize];
            let ok = file.read_exact_at(b, i * bs).is_ok() && xxh3_64(b) == sum;
            if !ok {
                self.checksum_failures.fetch_add(1, Relaxed);
                self.failed(
                    "dropping a block that does not match its checksum",
                    &format!("block {i} of {}", self.path_of(id).display()),
                );
                self.drop_block(id, i);
                good = false;
            }
        }
        if !good {
            return false;
        }
        let Ok(after) = file.metadata().map(|m| Stamp::of(&m)) else {
            return false;
        };
        // Written to while it was read: not verified.
        if after != before {
            return false;
        }
        let mut s = self.state.lock().unwrap();
        if let Some(v) = s.versions.peek_mut(&id) {
            v.stamp = Some(after);
        }
        drop(s);
        let _ = self.append(
            id,
            record(
                STAMP,
                [after.len, after.ino, after.mtime_ns, after.ctime_ns],
            ),
        );
        true
    }
}
