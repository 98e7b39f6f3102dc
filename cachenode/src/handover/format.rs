//! Whether a successor can read the disk tier it would take over.
//!
//! A block file starts with a magic and a format version; a node opening its
//! tier deletes the files it cannot read. A successor of another format would
//! so empty the tier it was meant to keep, so it refuses before opening it.

use std::io::Read;
use std::path::{Path, PathBuf};

use shoal::blocks::{encode_header, BlockKey};

/// The first bytes every block file of any version starts with.
const FAMILY: &[u8] = b"SHOALBK";
/// Files looked at: one in each of the tier's (at most 256) directories.
const SAMPLE: usize = 256;

/// The block file format this binary reads and writes: its header's magic and
/// version, taken from the header it writes so the two cannot disagree.
pub fn disk_format() -> u32 {
    let h = encode_header(&BlockKey::new("", "", "", 0, 0), &[]);
    u32::from_le_bytes(h[8..12].try_into().expect("a header has a version"))
}

fn magic() -> [u8; 8] {
    let h = encode_header(&BlockKey::new("", "", "", 0, 0), &[]);
    h[..8].try_into().expect("a header has a magic")
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FormatError {
    #[error(
        "the running node writes disk tier format {theirs}, this binary reads format {ours} only"
    )]
    Node { theirs: u32, ours: u32 },
    #[error("{} is a block file of another format ({found}); this binary reads format {ours} only", path.display())]
    Files {
        path: PathBuf,
        found: String,
        ours: u32,
    },
}

/// Whether the running node's format (from its offer) is this binary's.
pub fn check_node(theirs: u32) -> Result<(), FormatError> {
    let ours = disk_format();
    if theirs == ours {
        Ok(())
    } else {
        Err(FormatError::Node { theirs, ours })
    }
}

/// Whether the block files under `data_dir/blocks` are of this binary's format,
/// by a file from each directory.
pub fn check_files(data_dir: &Path) -> Result<(), FormatError> {
    let (ours, magic) = (disk_format(), magic());
    let Ok(dirs) = std::fs::read_dir(data_dir.join("blocks")) else {
        return Ok(());
    };
    for sub in dirs.flatten().take(SAMPLE) {
        let Ok(files) = std::fs::read_dir(sub.path()) else {
            continue;
        };
        let Some(file) = files
            .flatten()
            .map(|f| f.path())
            .find(|p| p.extension().is_some_and(|e| e == "blk"))
        else {
            continue;
        };
        let mut head = [0u8; 12];
        let read = std::fs::File::open(&file).and_then(|mut f| f.read_exact(&mut head));
        // Unreadable or foreign files are the tier's to drop, in any version.
        if read.is_err() || !head.starts_with(FAMILY) {
            continue;
        }
        let version = u32::from_le_bytes(head[8..12].try_into().unwrap());
        if head[..8] != magic || version != ours {
            return Err(FormatError::Files {
                path: file,
                found: format!("{} version {version}", String::from_utf8_lossy(&head[..8])),
                ours,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tier_of_this_format_passes_and_one_file_of_another_fails() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(check_files(dir.path()), Ok(()), "no tier yet");
        let key = BlockKey::new("b", "k", "e", 4, 0);
        let mut file = encode_header(&key, b"data");
        file.extend_from_slice(b"data");
        std::fs::create_dir_all(dir.path().join("blocks/00")).unwrap();
        std::fs::write(dir.path().join("blocks/00/a.blk"), &file).unwrap();
        assert_eq!(check_files(dir.path()), Ok(()));
        file[8..12].copy_from_slice(&(disk_format() + 1).to_le_bytes());
        std::fs::create_dir_all(dir.path().join("blocks/01")).unwrap();
        std::fs::write(dir.path().join("blocks/01/b.blk"), &file).unwrap();
        let e = check_files(dir.path()).unwrap_err();
        let want = format!("version {}", disk_format() + 1);
        assert!(e.to_string().contains(&want), "{e}");
        assert_eq!(check_node(disk_format()), Ok(()));
        assert!(check_node(disk_format() + 1).is_err());
    }
}
