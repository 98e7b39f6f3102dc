//! Where block files live and what a file on disk says it is: one file per
//! block, `blocks/XX/DIGEST.blk`, `XX` the digest's first byte (at most 256
//! files' worth of directories, none too large to list).

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::format::{decode_header, DecodeError, MAX_HEADER};
use crate::blocks::BlockKey;

/// Where `key` lives under a tier's `blocks` directory.
pub fn block_path(blocks: &Path, key: &BlockKey) -> PathBuf {
    let d = key.digest();
    blocks
        .join(format!("{:02x}", (d >> 120) as u8))
        .join(format!("{d:032x}.blk"))
}

/// A block file as its header describes it.
#[derive(Debug, Clone)]
pub struct OnDisk {
    pub key: BlockKey,
    /// The whole file: header and data.
    pub len: u64,
    pub modified: SystemTime,
}

/// Reads the header of the block file at `path` (not its data) and checks that
/// the file is as long as the header says.
pub fn read_header(path: &Path) -> Result<OnDisk, String> {
    let mut f = fs::File::open(path).map_err(|e| e.to_string())?;
    let meta = f.metadata().map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 4096.min(meta.len() as usize)];
    f.read_exact(&mut buf).map_err(|e| e.to_string())?;
    let h = match decode_header(&buf) {
        // A long key: the header runs past the first read.
        Err(DecodeError::HeaderLength(n)) if n <= MAX_HEADER && meta.len() as usize > buf.len() => {
            let mut all = Vec::new();
            fs::File::open(path)
                .and_then(|mut f| f.read_to_end(&mut all))
                .map_err(|e| e.to_string())?;
            decode_header(&all).map_err(|e| e.to_string())?
        }
        r => r.map_err(|e| e.to_string())?,
    };
    if h.header_len as u64 + h.data_len != meta.len() {
        return Err("file length does not match its header".into());
    }
    Ok(OnDisk {
        key: h.key,
        len: meta.len(),
        modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
    })
}

/// The size of the filesystem holding `dir`, if it can be asked.
pub fn filesystem_size(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes only into the struct passed; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_blocks as u64 * st.f_frsize as u64)
}

/// Bytes in use on the filesystem holding `dir`: at least what the tier's files
/// hold, whatever they are.
pub fn filesystem_used(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes only into the struct passed; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some((st.f_blocks as u64).saturating_sub(st.f_bfree as u64) * st.f_frsize as u64)
}
