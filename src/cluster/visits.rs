//! Which of a handle's reads count a use of their block for the RAM tier's
//! eviction policy.
//!
//! The kernel asks a FUSE daemon for 128 KiB to 1 MiB at a time, so one pass
//! over a block of several MiB is dozens of reads of it. Counted one use each,
//! every block a scan reads once looks read again, S3-FIFO moves it to its
//! main queue, and a scan pushes out the blocks that are read many times. So
//! a handle counts a use when its reads come to a block, not while they stay
//! in it. A second handle, or this one coming back later, counts again.
//!
//! What stays in a block: reads of the block the last read came to, and of
//! the one before it while the reads are in the next block (requests the
//! kernel sent in order may reach the daemon out of order, on several
//! threads). A block fetched ahead of the handle was used by that fetch (or
//! counted by it, if held already): the handle's first read of it counts
//! nothing more. Each handle keeps its own state under a lock held for a few
//! comparisons, so concurrent reads of one handle agree on which counts.

use std::collections::BTreeSet;

use crate::blocks::Touch;

#[derive(Debug, Default)]
pub(super) struct Visits {
    /// The block the last read came to.
    last: Option<u64>,
    /// The block before `last`.
    prev: Option<u64>,
    /// Blocks fetched ahead of the reads and not come to yet.
    ahead: BTreeSet<u64>,
}

impl Visits {
    /// A read of block `i`: whether it is a use of it.
    pub fn read(&mut self, i: u64) -> Touch {
        let late = self.prev == Some(i) && self.last == Some(i + 1);
        if self.last == Some(i) || late {
            return Touch::Peek;
        }
        let fetched = self.ahead.remove(&i);
        if !fetched && self.last.map(|l| l + 1) != Some(i) {
            // A jump: what was fetched for the run before it, reached again
            // later, is another pass over it.
            self.ahead.clear();
        }
        // Blocks passed over unread are not owed a free read any more.
        self.ahead.retain(|&b| b > i);
        self.prev = self.last.replace(i);
        if fetched {
            Touch::Peek
        } else {
            Touch::Use
        }
    }

    /// Whether block `i` is to be fetched ahead of the reads now (it then
    /// counts as fetched): not if they are there already, nor if it was
    /// fetched for them before (found held then, it would be counted twice).
    pub fn fetches_ahead(&mut self, i: u64) -> bool {
        let reached = self.last.is_some_and(|l| i <= l);
        !reached && self.ahead.insert(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(v: &mut Visits, blocks: &[u64]) -> Vec<bool> {
        blocks.iter().map(|&i| v.read(i) == Touch::Use).collect()
    }

    #[test]
    fn a_pass_counts_each_block_once_however_its_reads_arrive() {
        let mut v = Visits::default();
        let used = reads(&mut v, &[0, 0, 0, 1, 0, 1, 1, 2, 2, 1, 2, 3]);
        let counted: Vec<usize> = (0..used.len()).filter(|&i| used[i]).collect();
        assert_eq!(counted, [0, 3, 7, 11]);
    }

    #[test]
    fn coming_back_to_a_block_counts_again() {
        let mut v = Visits::default();
        // 0, on to 5 and back: both counted each time they are come to.
        assert_eq!(
            reads(&mut v, &[0, 0, 5, 5, 0, 5]),
            [true, false, true, false, true, true]
        );
        // A second pass over 0 and 1.
        let mut v = Visits::default();
        assert_eq!(reads(&mut v, &[0, 1, 2, 0, 1, 2]), [true; 6]);
    }

    #[test]
    fn a_block_fetched_ahead_is_not_counted_again_when_the_reads_come_to_it() {
        let mut v = Visits::default();
        assert_eq!(v.read(0), Touch::Use);
        assert!(v.fetches_ahead(1) && v.fetches_ahead(2) && v.fetches_ahead(3));
        assert!(!v.fetches_ahead(0), "the reads are there already");
        assert!(!v.fetches_ahead(2), "fetched for them already");
        assert_eq!(reads(&mut v, &[1, 1, 2, 3]), [false; 4]);
        // Fetched ahead, then a jump back: that pass's blocks count again.
        assert!(v.fetches_ahead(4) && v.fetches_ahead(5));
        assert_eq!(reads(&mut v, &[0, 4, 5]), [true, true, true]);
        // Passed over unread: counted when read after all.
        assert!(v.fetches_ahead(6) && v.fetches_ahead(7));
        assert_eq!(reads(&mut v, &[7, 6]), [false, true]);
    }
}
