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

use std::ops::Range;

/// Sequential-open detection for one directory listing.
#[derive(Debug, Default)]
pub struct DirWalk {
    /// Index after the last entry opened; `None` before the first open.
    next: Option<usize>,
    /// Entries to keep fetched ahead (0 until visits are seen in order).
    window: usize,
    /// Entries below this index were already asked for.
    fetched_until: usize,
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
    fn zero_files_turns_it_off() {
        let mut w = DirWalk::default();
        for i in 0..10 {
            assert!(w.opened(i, 100, 0, u64::MAX, |_| 1).is_empty());
        }
    }
}
