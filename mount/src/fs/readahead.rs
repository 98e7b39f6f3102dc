//! Read-ahead within one open file: sequential reads (small forward skips
//! included) grow a window of blocks fetched ahead, from one and doubling up to
//! `read_window`; a random read resets it.

/// Per-handle sequential detection.
#[derive(Default, Debug)]
pub(super) struct Readahead {
    /// Where the next sequential read would start.
    next: u64,
    /// Blocks to keep fetched ahead (0 until a read is seen as sequential).
    window: u64,
    /// Blocks below this index were already asked for.
    fetched_until: u64,
}

impl Readahead {
    /// Records a read of `offset..end` in blocks of `bs`; returns the blocks to
    /// fetch ahead now, as (first, count).
    pub fn advance(&mut self, offset: u64, end: u64, bs: u64, max: u64) -> Option<(u64, u64)> {
        let last_block = (end - 1) / bs;
        // Small forward skips inside the window still count as sequential.
        let sequential = offset == self.next
            || (offset > self.next && offset - self.next <= self.window.max(1) * bs);
        self.window = if sequential {
            (self.window * 2).clamp(1, max)
        } else {
            0
        };
        self.next = end;
        if self.window == 0 {
            self.fetched_until = last_block + 1;
            return None;
        }
        let from = self.fetched_until.max(last_block + 1);
        let to = last_block + 1 + self.window;
        self.fetched_until = self.fetched_until.max(to);
        (to > from).then_some((from, to - from))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_reads_double_the_window_and_a_jump_resets_it() {
        let mut ra = Readahead::default();
        // 1 MiB reads of 1 MiB blocks, from the start.
        let mb = 1u64 << 20;
        assert_eq!(ra.advance(0, mb, mb, 8), Some((1, 1)));
        assert_eq!(ra.advance(mb, 2 * mb, mb, 8), Some((2, 2)));
        assert_eq!(ra.advance(2 * mb, 3 * mb, mb, 8), Some((4, 3)));
        assert_eq!(ra.advance(3 * mb, 4 * mb, mb, 8), Some((7, 5)));
        // At the cap, one more block per block read.
        assert_eq!(ra.advance(4 * mb, 5 * mb, mb, 8), Some((12, 1)));
        // A jump back: nothing ahead, and the window starts over.
        assert_eq!(ra.advance(0, 4096, mb, 8), None);
        assert_eq!(ra.advance(4096, 8192, mb, 8), Some((1, 1)));
        // A short skip forward stays sequential.
        assert!(ra.advance(8192 + 4096, 16384, mb, 8).is_some());
    }
}
