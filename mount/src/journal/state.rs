//! The live state records add up to, and what a record may say given what came
//! before it: an inode number is handed out once, in increasing order; a handle
//! names an inode of its kind and is not open twice; what is closed or released
//! was open.

use std::collections::HashMap;

use shoal::store::ObjectMeta;

use super::record::{Bad, Record};
use crate::kernel::Negotiated;

/// The root's inode: the kernel knows it without being told.
const ROOT: u64 = 1;

/// What a successor needs: the INIT agreed, every inode the kernel may name, the
/// page cache's versions, the open handles and the backing files registered.
#[derive(Debug, Default, Clone, PartialEq)]
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
    /// Inode -> whether a directory, for the checks.
    kinds: HashMap<u64, bool>,
}

impl State {
    /// Adds `r`, unless it contradicts what is there.
    pub(super) fn apply(&mut self, r: Record) -> Result<(), Bad> {
        let no = |why: String| Err(Bad::Contradicts(why));
        match r {
            Record::Agreed(n) => {
                if self.agreed.is_some() {
                    return no("a second INIT".into());
                }
                self.agreed = Some(n);
            }
            Record::Inode { ino, dir, path } => {
                let last = self.inodes.last().map_or(ROOT, |i| i.0);
                if ino <= last {
                    return no(format!(
                        "inode {ino} handed out after inode {last} (numbers only grow)"
                    ));
                }
                self.kinds.insert(ino, dir);
                self.inodes.push((ino, dir, path));
            }
            Record::PageVersion { ino, etag } => {
                self.file_inode(ino)?;
                if self.page_versions.insert(ino, etag).is_some() {
                    return no(format!("a second page cache version for inode {ino}"));
                }
            }
            Record::File { fh, ino, meta } => {
                self.new_handle(fh)?;
                self.file_inode(ino)?;
                self.files.insert(fh, (ino, meta));
            }
            Record::Dir { fh, ino } => {
                self.new_handle(fh)?;
                if ino != ROOT && self.kinds.get(&ino) != Some(&true) {
                    return no(format!(
                        "directory handle {fh} on inode {ino}, no directory"
                    ));
                }
                self.dirs.insert(fh, ino);
            }
            Record::Closed { fh } => {
                if self.files.remove(&fh).is_none() && self.dirs.remove(&fh).is_none() {
                    return no(format!("handle {fh} closed, but it is not open"));
                }
                self.passed.remove(&fh);
            }
            Record::Passed { fh, ino, backed } => {
                if self.files.get(&fh).map(|f| f.0) != Some(ino) {
                    return no(format!(
                        "handle {fh} passed through as inode {ino}, which it did not open"
                    ));
                }
                if backed && !self.backings.contains_key(&ino) {
                    return no(format!(
                        "handle {fh} uses inode {ino}'s backing file, which it has not"
                    ));
                }
                if self.passed.insert(fh, (ino, backed)).is_some() {
                    return no(format!("handle {fh} passed through twice"));
                }
            }
            Record::Backing { ino, id, etag } => {
                self.file_inode(ino)?;
                if self.backings.insert(ino, (id, etag)).is_some() {
                    return no(format!("a second backing file for inode {ino}"));
                }
            }
            Record::BackingGone { ino } => {
                if self.backings.remove(&ino).is_none() {
                    return no(format!(
                        "inode {ino}'s backing file released, but it has none"
                    ));
                }
            }
            Record::SnapshotBegin | Record::SnapshotEnd => {
                unreachable!("a snapshot's bounds are the replay's")
            }
        }
        Ok(())
    }

    fn file_inode(&self, ino: u64) -> Result<(), Bad> {
        match self.kinds.get(&ino) {
            Some(false) => Ok(()),
            Some(true) => Err(Bad::Contradicts(format!(
                "inode {ino} is a directory, not a file"
            ))),
            None => Err(Bad::Contradicts(format!(
                "inode {ino} was never handed out"
            ))),
        }
    }

    fn new_handle(&self, fh: u64) -> Result<(), Bad> {
        if fh == 0 {
            return Err(Bad::Contradicts("handle 0 (never handed out)".into()));
        }
        if self.files.contains_key(&fh) || self.dirs.contains_key(&fh) {
            return Err(Bad::Contradicts(format!("handle {fh} opened while open")));
        }
        Ok(())
    }

    /// The records that make this state again, and nothing else, in an order
    /// [`State::apply`] takes (a handle after its inode, a passthrough after its
    /// handle and backing file) and the same each time.
    pub fn records(&self) -> Vec<Record> {
        fn sorted<K: Ord + Copy, V>(m: &HashMap<K, V>) -> Vec<(K, &V)> {
            let mut v: Vec<_> = m.iter().map(|(k, v)| (*k, v)).collect();
            v.sort_by_key(|e| e.0);
            v
        }
        let mut out = Vec::new();
        out.extend(self.agreed.map(Record::Agreed));
        out.extend(self.inodes.iter().map(|(ino, dir, path)| Record::Inode {
            ino: *ino,
            dir: *dir,
            path: path.clone(),
        }));
        for (ino, etag) in sorted(&self.page_versions) {
            out.push(Record::PageVersion {
                ino,
                etag: etag.clone(),
            });
        }
        for (ino, (id, etag)) in sorted(&self.backings) {
            out.push(Record::Backing {
                ino,
                id: *id,
                etag: etag.clone(),
            });
        }
        for (fh, (ino, meta)) in sorted(&self.files) {
            out.push(Record::File {
                fh,
                ino: *ino,
                meta: meta.clone(),
            });
        }
        for (fh, ino) in sorted(&self.dirs) {
            out.push(Record::Dir { fh, ino: *ino });
        }
        for (fh, (ino, backed)) in sorted(&self.passed) {
            out.push(Record::Passed {
                fh,
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

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.agreed.is_none() && self.inodes.is_empty() && self.dirs.is_empty()
    }
}
