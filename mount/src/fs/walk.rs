//! Read-ahead across the entries of a directory.
//!
//! A directory walked in listing order (`cp -r`, `tar`, `cat dir/*`, `find`, a
//! training loop over small samples) otherwise pays the origin's first-byte
//! latency once per entry, one at a time: read-ahead within a file cannot help a
//! file of one block, nor a directory's listing. Two visits in a row in listing
//! order (files or directories opened) start a window of entries, doubling with
//! each further one up to a maximum; each entry in the window is fetched before
//! it is visited (a file's first block, a directory's listing). Any other visit
//! ends the walk, so random access over a directory fetches nothing extra. A
//! directory entered from a walk in its parent (`tar`, `cp -r` going down a tree)
//! counts as walked already: its first visit in order fetches ahead.
//!
//! Only files read whole gain from it: a directory whose last file opened was
//! first read away from its start (a Parquet or ORC footer, a database's
//! pages) is read in ranges, and a file's first block would mostly be bytes
//! its reader never asks for. Its walk goes on but fetches no file ahead until
//! a file of it is read from its start again.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shoal::cluster::ClusterReader;
use shoal::store::ObjectMeta;

use super::namespace::{find_entry, Namespace};
use super::{DirEntry, FsOptions, FsStats, Kind};

/// Sequential-open detection for one directory listing.
#[derive(Debug, Default)]
pub struct DirWalk {
    /// Index after the last entry opened; `None` before the first open.
    next: Option<usize>,
    /// Entries to keep fetched ahead (0 until visits are seen in order).
    window: usize,
    /// Entries below this index were already asked for.
    fetched_until: usize,
    /// The last file read in this directory was first read away from its
    /// start: fetch no file ahead.
    ranged: bool,
}

impl DirWalk {
    /// Records an open of entry `idx` of a listing of `len` entries; returns the
    /// entries to fetch ahead now. `cost(i)` is what fetching entry `i` ahead
    /// holds in memory: the entries fetched ahead and not yet opened never cost
    /// more than `budget` together, nor number more than `max_files`.
    pub fn opened(
        &mut self,
        idx: usize,
        len: usize,
        max_files: usize,
        budget: u64,
        cost: impl Fn(usize) -> u64,
    ) -> Range<usize> {
        let next = idx + 1;
        let sequential = match self.next {
            // The same file again (`stat` then `cat`, a tool that opens twice):
            // neither a step forward nor a jump.
            Some(n) if n == next => return next..next,
            // The next entry, or a short skip forward (directories, files the
            // walker leaves out) within what is fetched ahead.
            Some(n) => idx >= n && idx - n <= self.window,
            None => false,
        };
        self.next = Some(next);
        if !sequential || max_files == 0 {
            self.window = 0;
            self.fetched_until = next;
            return next..next;
        }
        self.window = (self.window * 2).clamp(2, max_files);
        if self.ranged {
            return next..next;
        }
        self.extend(next, len, budget, cost)
    }

    /// Marks a directory entered from a walk in its parent as walked, as if the
    /// entry before its first had just been opened in order, with the window
    /// the walk has grown to: a walker going down a tree of small directories
    /// must not start over in each. Nothing is fetched yet: a walker that only
    /// lists (`find`, `du`) opens no file, and must not cost file reads. A
    /// directory already walked is left as it is.
    pub fn entered(&mut self, max_files: usize) {
        if self.next.is_none() && max_files > 0 {
            self.next = Some(0);
            self.window = (max_files / 2).max(1);
        }
    }

    /// Whether the last open was part of a walk.
    pub fn walking(&self) -> bool {
        self.window > 0
    }

    /// Fetches ahead up to `window` entries from `next`: the new ones, within
    /// `budget` together with those still ahead.
    fn extend(
        &mut self,
        next: usize,
        len: usize,
        budget: u64,
        cost: impl Fn(usize) -> u64,
    ) -> Range<usize> {
        let from = self.fetched_until.max(next);
        let mut ahead: u64 = (next..from).map(&cost).sum();
        let mut to = from;
        while to < len.min(next + self.window) {
            let c = cost(to);
            if ahead + c > budget {
                break;
            }
            ahead += c;
            to += 1;
        }
        self.fetched_until = to;
        from..to
    }
}

/// The walk over every directory being visited, and what fetching ahead needs.
pub(super) struct Walks {
    walks: Mutex<HashMap<u64, DirWalk>>,
    ns: Arc<Namespace>,
    reader: Arc<ClusterReader>,
    bucket: String,
    /// Most entries fetched ahead (0: none).
    prefetch_files: usize,
    metadata_ttl: Duration,
    /// Whether files can be fetched ahead: only into a client RAM tier.
    fetch_blocks: bool,
    stats: Arc<FsStats>,
}

impl Walks {
    pub fn new(
        ns: Arc<Namespace>,
        reader: Arc<ClusterReader>,
        opts: &FsOptions,
        stats: Arc<FsStats>,
    ) -> Walks {
        Walks {
            walks: Mutex::new(HashMap::new()),
            fetch_blocks: reader.ram_stats().capacity_bytes > 0,
            ns,
            reader,
            bucket: opts.bucket.clone(),
            prefetch_files: opts.prefetch_files,
            metadata_ttl: opts.metadata_ttl,
            stats,
        }
    }

    /// Notes a visit of `path` (a file opened, a directory opened) in its parent's
    /// walk and fetches ahead what the walk runs to. Only a fresh listing of the
    /// parent counts: a visit must not cost a listing. Returns whether the visit
    /// was part of a walk.
    pub fn visit(&self, path: &str) -> bool {
        if self.prefetch_files == 0 {
            return false;
        }
        let path = path.strip_suffix('/').unwrap_or(path);
        if path.is_empty() {
            return false;
        }
        let (dir, name) = match path.rfind('/') {
            Some(i) => (&path[..=i], &path[i + 1..]),
            None => ("", path),
        };
        let Some(parent) = self.ns.inodes.by_path(dir) else {
            return false;
        };
        let Some(entries) = self.ns.fresh_listing(parent) else {
            return false;
        };
        let Some(idx) = find_entry(&entries, name) else {
            return false;
        };
        self.walk_step(parent, &entries, |w, len, max, budget, cost| {
            w.opened(idx, len, max, budget, cost)
        })
    }

    /// A file at `path` had its first read, from its start or not: whether its
    /// directory's files are read whole or in ranges.
    pub fn first_read(&self, path: &str, from_start: bool) {
        if self.prefetch_files == 0 {
            return;
        }
        let dir = path.rfind('/').map_or("", |i| &path[..=i]);
        if let Some(parent) = self.ns.inodes.by_path(dir) {
            self.with_walk(parent, |w| w.ranged = !from_start);
        }
    }

    /// Directory `ino` was entered from a walk in its parent: its first open in
    /// listing order continues the walk.
    pub fn enter(&self, ino: u64) {
        if self.prefetch_files > 0 {
            self.with_walk(ino, |w| w.entered(self.prefetch_files));
        }
    }

    /// Runs `f` on the walk over directory `dir`. Walks of directories nobody
    /// visits any more are dropped wholesale past a bound: losing one only
    /// restarts its detection.
    fn with_walk<T>(&self, dir: u64, f: impl FnOnce(&mut DirWalk) -> T) -> T {
        let mut walks = self.walks.lock().unwrap();
        if walks.len() > 4096 && !walks.contains_key(&dir) {
            walks.clear();
        }
        f(walks.entry(dir).or_default())
    }

    /// Moves the walk over directory `dir` one step and fetches ahead the entries
    /// it runs to: the first block of files, the listing of directories. Returns
    /// whether the directory is being walked.
    fn walk_step(
        &self,
        dir: u64,
        entries: &[DirEntry],
        step: impl FnOnce(&mut DirWalk, usize, usize, u64, &dyn Fn(usize) -> u64) -> Range<usize>,
    ) -> bool {
        let bs = self.reader.block_size();
        let budget = self.reader.read_window() as u64 * bs;
        let ttl = self.metadata_ttl;
        let (walking, files, dirs) = self.ns.inodes.with(|t| {
            // What an entry in the window holds once fetched: a file's first block;
            // a listing is small.
            let first_block = |i: usize| match entries[i].kind {
                Kind::File if self.fetch_blocks => {
                    t.by_ino.get(&entries[i].ino).map_or(0, |n| n.size.min(bs))
                }
                _ => 0,
            };
            let (walking, range) = self.with_walk(dir, |w| {
                let range = step(w, entries.len(), self.prefetch_files, budget, &first_block);
                (w.walking(), range)
            });
            let mut files: Vec<(String, ObjectMeta)> = Vec::new();
            let mut dirs: Vec<u64> = Vec::new();
            for e in &entries[range] {
                match e.kind {
                    Kind::Dir => dirs.push(e.ino),
                    Kind::File if self.fetch_blocks => {
                        let Some(n) = t.by_ino.get(&e.ino) else {
                            continue;
                        };
                        if let Some(meta) = n.fresh_meta(ttl).filter(|m| m.size > 0) {
                            files.push((self.ns.full_key(&n.path), meta));
                        }
                    }
                    Kind::File => {}
                }
            }
            (walking, files, dirs)
        });
        for ino in dirs {
            if self.ns.fresh_listing(ino).is_some() {
                continue;
            }
            self.stats.prefetched_listings.fetch_add(1, Relaxed);
            let ns = self.ns.clone();
            tokio::spawn(async move {
                // The walker's own listing of it joins this one.
                let _ = ns.readdir(ino).await;
            });
        }
        if !files.is_empty() {
            self.stats
                .prefetched_files
                .fetch_add(files.len() as u64, Relaxed);
            // Started before this visit is answered: the walker's read of one
            // of these files comes after it, and joins the file's fetch rather
            // than fetching it beside. Each fetch runs in a task of its own, so
            // the files are fetched side by side.
            for (key, meta) in files {
                self.reader
                    .open_known(&self.bucket, &key, meta)
                    .prefetch(0, 1);
            }
        }
        walking
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(w: &mut DirWalk, idx: usize) -> Range<usize> {
        w.opened(idx, 100, 8, u64::MAX, |_| 1)
    }

    #[test]
    fn opens_in_order_grow_a_window() {
        let mut w = DirWalk::default();
        assert_eq!(walk(&mut w, 0), 1..1, "one open is no walk yet");
        assert_eq!(walk(&mut w, 1), 2..4);
        assert_eq!(walk(&mut w, 2), 4..7);
        assert_eq!(walk(&mut w, 3), 7..12);
        assert_eq!(walk(&mut w, 4), 12..13, "window stays at the maximum");
        assert_eq!(walk(&mut w, 5), 13..14);
    }

    #[test]
    fn a_jump_or_a_step_back_ends_the_walk() {
        let mut w = DirWalk::default();
        walk(&mut w, 0);
        walk(&mut w, 1);
        walk(&mut w, 2);
        assert_eq!(walk(&mut w, 50), 51..51);
        assert_eq!(walk(&mut w, 10), 11..11);
        assert_eq!(walk(&mut w, 11), 12..14, "a new walk starts over");
    }

    #[test]
    fn reopening_the_same_file_changes_nothing() {
        let mut w = DirWalk::default();
        walk(&mut w, 0);
        assert_eq!(walk(&mut w, 1), 2..4);
        assert_eq!(walk(&mut w, 1), 2..2);
        assert_eq!(walk(&mut w, 2), 4..7);
    }

    #[test]
    fn short_skips_forward_stay_in_the_walk() {
        let mut w = DirWalk::default();
        walk(&mut w, 0);
        walk(&mut w, 1);
        walk(&mut w, 2); // window 4, fetched up to 7
        assert_eq!(walk(&mut w, 5), 7..14, "skipped 3 and 4");
    }

    #[test]
    fn the_listing_end_and_the_budget_bound_it() {
        let mut w = DirWalk::default();
        w.opened(0, 3, 8, u64::MAX, |_| 1);
        assert_eq!(w.opened(1, 3, 8, u64::MAX, |_| 1), 2..3);
        assert_eq!(w.opened(2, 3, 8, u64::MAX, |_| 1), 3..3);

        // Entries cost 10 each, 25 may be ahead: two at a time.
        let mut w = DirWalk::default();
        let c = |_| 10;
        w.opened(0, 100, 8, 25, c);
        assert_eq!(w.opened(1, 100, 8, 25, c), 2..4);
        assert_eq!(w.opened(2, 100, 8, 25, c), 4..5, "3 is still ahead");
        // An entry larger than the whole budget is never fetched ahead.
        let mut w = DirWalk::default();
        w.opened(0, 100, 8, 25, |_| 30);
        assert_eq!(w.opened(1, 100, 8, 25, |_| 30), 2..2);
    }

    #[test]
    fn a_directory_entered_from_a_walk_is_walked_from_its_first_open() {
        let mut w = DirWalk::default();
        w.entered(8);
        assert!(w.walking());
        assert_eq!(
            walk(&mut w, 0),
            1..9,
            "the first open fetches a full window"
        );
        assert_eq!(walk(&mut w, 1), 9..10);
        w.entered(8);
        assert_eq!(walk(&mut w, 2), 10..11, "entering again changes nothing");

        let mut w = DirWalk::default();
        w.entered(8);
        assert_eq!(walk(&mut w, 3), 4..12, "a short skip is still the walk");
        let mut w = DirWalk::default();
        w.entered(0);
        assert!(!w.walking());
        let mut w = DirWalk::default();
        walk(&mut w, 3);
        w.entered(8);
        assert!(
            !w.walking(),
            "a directory already opened in is left as it is"
        );
    }

    #[test]
    fn a_directory_of_files_read_in_ranges_fetches_no_file_ahead() {
        let mut w = DirWalk::default();
        walk(&mut w, 0);
        w.ranged = true;
        assert_eq!(walk(&mut w, 1), 2..2);
        assert_eq!(walk(&mut w, 2), 3..3);
        assert!(w.walking(), "the walk goes on");
        // A file read from its start again: the walk fetches ahead again.
        w.ranged = false;
        assert_eq!(walk(&mut w, 3), 4..12);
    }

    #[test]
    fn zero_files_turns_it_off() {
        let mut w = DirWalk::default();
        for i in 0..10 {
            assert!(w.opened(i, 100, 0, u64::MAX, |_| 1).is_empty());
        }
    }
}
