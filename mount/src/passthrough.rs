//! FUSE passthrough: a file the mount's disk tier holds whole is opened with a
//! backing file, and the kernel reads it directly, no daemon in the way.
//!
//! The kernel keeps one backing file per inode and will not mix passthrough and
//! cached opens of it, so: a backing file is registered once per inode (and
//! version) and shared by every handle of it while one is open; an inode open
//! through the daemon is not passed through until those handles close, and one
//! open with a backing file of another version opens through the daemon. Where
//! the kernel or the device refuses (no `CONFIG_FUSE_PASSTHROUGH`, no
//! `CAP_SYS_ADMIN`), the mount says so once and reads through the daemon.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crate::journal::{Journal, Record, State};
use crate::kernel::Channel;

/// A backing file registered with the kernel, dropped from it when the last
/// handle using it closes.
pub struct BackingId {
    pub id: u32,
    chan: Arc<Channel>,
}

impl BackingId {
    /// Registers `file` on `chan`.
    pub fn register(chan: &Arc<Channel>, file: &std::fs::File) -> std::io::Result<BackingId> {
        use std::os::fd::AsFd;
        let id = chan.open_backing(file.as_fd())?;
        Ok(BackingId {
            id,
            chan: chan.clone(),
        })
    }
}

impl Drop for BackingId {
    fn drop(&mut self) {
        self.chan.close_backing(self.id);
    }
}

#[derive(Default)]
struct Inode {
    /// Handles open through the daemon.
    cached: usize,
    /// The backing file shared by the passthrough handles, its version and count.
    backing: Option<(Arc<BackingId>, String, usize)>,
}

/// How an open goes ([`Passthrough::open`]).
pub enum Open {
    Backed(Arc<BackingId>),
    Cached,
    Retry,
}

pub struct Passthrough {
    on: AtomicBool,
    inodes: Mutex<HashMap<u64, Inode>>,
    /// Handle -> (inode, passed through).
    handles: Mutex<HashMap<u64, (u64, bool)>>,
    /// Backing files and passed-through handles outlive this process: a
    /// successor must close them when their handles close.
    journal: Option<Arc<Journal>>,
}

impl Passthrough {
    pub fn new(journal: Option<Arc<Journal>>) -> Passthrough {
        Passthrough {
            on: AtomicBool::new(false),
            inodes: Mutex::default(),
            handles: Mutex::default(),
            journal,
        }
    }

    fn journal(&self, r: Record) {
        if let Some(j) = &self.journal {
            j.append(&r);
        }
    }

    /// Takes over a predecessor's backing files (registered with the kernel
    /// still) and the handles using them.
    pub fn restore(&self, state: &State, chan: &Arc<Channel>) {
        let mut inodes = self.inodes.lock().unwrap();
        for (ino, (id, etag)) in &state.backings {
            let n = inodes.entry(*ino).or_default();
            n.backing = Some((
                Arc::new(BackingId {
                    id: *id,
                    chan: chan.clone(),
                }),
                etag.clone(),
                0,
            ));
        }
        let mut handles = self.handles.lock().unwrap();
        for (fh, (ino, backed)) in &state.passed {
            let n = inodes.entry(*ino).or_default();
            match (&mut n.backing, backed) {
                (Some((_, _, count)), true) => *count += 1,
                _ => n.cached += 1,
            }
            handles.insert(*fh, (*ino, *backed));
        }
    }
    pub fn set(&self, on: bool) {
        self.on.store(on, Relaxed);
    }

    pub fn is_on(&self) -> bool {
        self.on.load(Relaxed)
    }

    /// How handle `fh` of inode `ino` at `etag` opens: with the inode's backing
    /// file (registering one with `register` if it has none), through the
    /// daemon, or not at all here (the inode reads another version's backing
    /// file: retry on a fresh lookup).
    pub fn open(
        &self,
        ino: u64,
        fh: u64,
        etag: &str,
        register: impl FnOnce() -> std::io::Result<BackingId>,
    ) -> Open {
        let mut inodes = self.inodes.lock().unwrap();
        let n = inodes.entry(ino).or_default();
        let shared = match &mut n.backing {
            Some((id, e, count)) if e == etag => {
                *count += 1;
                Some(id.clone())
            }
            Some(_) => return Open::Retry,
            None if n.cached > 0 || !self.is_on() => None,
            None => match register() {
                Ok(id) => {
                    self.journal(Record::Backing {
                        ino,
                        id: id.id,
                        etag: etag.to_owned(),
                    });
                    let id = Arc::new(id);
                    n.backing = Some((id.clone(), etag.to_owned(), 1));
                    Some(id)
                }
                Err(e) => {
                    if self.on.swap(false, Relaxed) {
                        tracing::warn!(
                            "FUSE passthrough refused ({e}): files are read through the mount from now on"
                        );
                    }
                    None
                }
            },
        };
        if shared.is_none() {
            n.cached += 1;
        }
        let backed = shared.is_some();
        self.journal(Record::Passed { fh, ino, backed });
        self.handles.lock().unwrap().insert(fh, (ino, backed));
        match shared {
            Some(id) => Open::Backed(id),
            None => Open::Cached,
        }
    }

    /// Whether inode `ino` has a backing file registered now.
    pub fn has_backing(&self, ino: u64) -> bool {
        self.inodes
            .lock()
            .unwrap()
            .get(&ino)
            .is_some_and(|n| n.backing.is_some())
    }

    /// Handle `fh` of inode `ino` is to be open through the daemon; false if the
    /// kernel would refuse that (the inode reads through a backing file of
    /// another version), in which case the open should be retried on a fresh
    /// lookup.
    pub fn open_cached(&self, ino: u64, fh: u64) -> bool {
        let mut inodes = self.inodes.lock().unwrap();
        let n = inodes.entry(ino).or_default();
        if n.backing.is_some() {
            return false;
        }
        n.cached += 1;
        self.journal(Record::Passed {
            fh,
            ino,
            backed: false,
        });
        self.handles.lock().unwrap().insert(fh, (ino, false));
        true
    }

    /// Handle `fh` closed; the last passthrough handle of an inode releases its
    /// backing file.
    pub fn release(&self, fh: u64) {
        let Some((ino, passed)) = self.handles.lock().unwrap().remove(&fh) else {
            return;
        };
        let mut inodes = self.inodes.lock().unwrap();
        let Some(n) = inodes.get_mut(&ino) else {
            return;
        };
        if passed {
            if let Some((_, _, count)) = &mut n.backing {
                *count -= 1;
                if *count == 0 {
                    n.backing = None;
                    self.journal(Record::BackingGone { ino });
                }
            }
        } else {
            n.cached = n.cached.saturating_sub(1);
        }
        if n.cached == 0 && n.backing.is_none() {
            inodes.remove(&ino);
        }
    }
}
