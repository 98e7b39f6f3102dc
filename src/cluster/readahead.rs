//! Read-ahead within one open file, following the reader: a read that continues
//! the last one (or leaves a small gap after it, a format's padding) grows a
//! window of blocks fetched ahead, from one and doubling up to a limit; any
//! other read is a jump and starts the window over at none, so nothing is ever
//! fetched across a region the reader skipped. A file's first read only starts a
//! run: a reader that opens a file and reads its end first (a Parquet or ORC
//! footer, a zip's directory) is not scanning it, and one that is scanning
//! shows it at its second read. Once a run is going (or from a file's start),
//! its reads may arrive a little out of order (the kernel's read-ahead
//! requests reach the daemon on several threads): a read up to a window (at
//! least a block) past the run's end still continues it, and one up to a
//! window (at least two blocks) behind it is part of it without growing
//! anything.
//!
//! The limit starts at `read_window` and adapts to the path: each time a
//! sequential reader has read a whole window's worth at the current limit, the
//! limit doubles (up to the reader's in-flight budget) if reads waited for
//! bytes to arrive in that step and throughput rose by more than a sixth since
//! the last step, and stays where it is once it did not rise, twice in a row
//! (one step's measure on a busy host can be off by half). A cold read so fills
//! the origin's bandwidth-delay product; a path that keeps ahead of its reader
//! (warm nodes) is not read further ahead than it needs, which keeps the blocks
//! in flight few enough to still be in the CPU's cache when they are replied
//! from; small and random reads stay small. A jump starts the window over but
//! keeps the limit: that belongs to the path, not to the reader.
//!
//! A handle opened with direct I/O (files of formats read in ranges) gets the
//! reader's own reads, a column chunk or a page each, split by the kernel into
//! requests of at most a block that arrive one after another, exactly as a
//! sequential reader's would. What follows such a read is as likely a jump to
//! another chunk as more of the same, so there nothing is fetched ahead until
//! the run has read two blocks, and then the window is held to an eighth of
//! what the run has read (at least one block): the bytes fetched past a
//! chunk's end stay a small part of the chunk, and a long run (a copy of the
//! whole file) still reads far ahead.

use std::time::Instant;

/// Throughput must rise by this factor for the limit to double again.
const GAIN: f64 = 1.17;
/// Steps in a row without that gain after which the limit stays.
const FLAT_STEPS: u8 = 2;
/// A gap after the last read that still continues it: padding and alignment
/// between a format's records, never a skipped column chunk of any size.
const PAD: u64 = 64 << 10;

/// Per-handle sequential detection.
#[derive(Default, Debug)]
pub struct Readahead {
    /// The run the last reads belong to: its first byte, and where a read
    /// continuing it starts (`None` before the first read).
    run: Option<(u64, u64)>,
    /// Blocks to keep fetched ahead (0 until a read continues the run).
    window: u64,
    /// Blocks below this index were already asked for.
    fetched_until: u64,
    /// What `window` may grow to now (0: not yet set).
    limit: u64,
    /// Since the limit last changed: when, and bytes read.
    epoch: Option<(Instant, u64)>,
    /// Throughput (bytes/s) at the last step, to beat at the next.
    rate: f64,
    /// Steps in a row in which throughput did not rise; at [`FLAT_STEPS`] the
    /// limit stays.
    flat: u8,
    /// Whether a read in this step waited for its bytes to arrive.
    waited: bool,
    /// The kernel passes the reader's reads as they are (direct I/O).
    direct: bool,
}

/// Of what a direct-I/O run has read, the part its window may be.
const DIRECT_SHARE: u64 = 8;
/// Blocks a direct-I/O run reads before anything is fetched ahead of it: the
/// columns of one row group of a small file read one after another are no
/// scan.
const DIRECT_FIRST: u64 = 2;

/// What a read is to the run before it.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Past the run's end, within the gap it may leave: the window grows.
    Continues,
    /// Inside the run, or a little behind its end: reads of the run arriving
    /// out of order. Nothing grows, nothing starts over.
    Within,
    /// Anywhere else, or the first read: a run starts here, with no window.
    Jump,
}

impl Readahead {
    /// Detection for a handle whose reads come from the page cache's
    /// read-ahead (`direct` false) or straight from its reader.
    pub fn new(direct: bool) -> Readahead {
        Readahead {
            direct,
            ..Default::default()
        }
    }

    /// Records a read of `offset..end` at `now` in blocks of `bs`, with the limit
    /// starting at `base` and never past `max` blocks, nor the window past the
    /// `max` of this read; returns the blocks to fetch ahead now, as (first,
    /// count).
    pub fn advance(
        &mut self,
        offset: u64,
        end: u64,
        bs: u64,
        base: u64,
        max: u64,
        now: Instant,
    ) -> Option<(u64, u64)> {
        let last_block = (end - 1) / bs;
        match self.step(offset, end, bs) {
            Step::Jump => {
                // The window starts over; what was learned of the path stays.
                self.run = Some((offset, end));
                self.window = 0;
                self.fetched_until = last_block + 1;
                self.epoch = None;
                return None;
            }
            Step::Within => {
                if self.window > 0 {
                    self.adapt(end - offset, bs, max.max(1), now);
                }
                return None;
            }
            Step::Continues => {}
        }
        if self.limit == 0 {
            self.limit = base.clamp(1, max.max(1));
        }
        self.adapt(end - offset, bs, max.max(1), now);
        // `max` may have shrunk since the limit was learned (a share of a
        // budget that more readers use now): the window keeps under both.
        self.window = (self.window * 2).clamp(1, self.limit.min(max.max(1)));
        if self.direct {
            let read = end - self.run.map_or(offset, |(lo, _)| lo);
            if read < DIRECT_FIRST * bs {
                self.window = 0;
                return None;
            }
            self.window = self.window.min((read / (DIRECT_SHARE * bs)).max(1));
        }
        let from = self.fetched_until.max(last_block + 1);
        let to = last_block + 1 + self.window;
        self.fetched_until = self.fetched_until.max(to);
        (to > from).then(|| (from, to - from))
    }

    /// Places `offset..end` against the run so far, moving the run's bounds.
    fn step(&mut self, offset: u64, end: u64, bs: u64) -> Step {
        let Some((lo, next)) = self.run else {
            return Step::Jump;
        };
        // A run going (or a scan from the file's start, whose first requests
        // may come in any order) tolerates the order its requests arrive in: a
        // window of them, at least a block, on either side of its end.
        let (ahead, behind) = if self.window > 0 || lo == 0 {
            let w = bs.max(self.window * bs);
            (w, w.max(2 * bs))
        } else {
            (PAD, PAD)
        };
        if end > next && offset <= next + ahead && offset + behind >= lo {
            self.run = Some((lo.min(offset), end));
            Step::Continues
        } else if end <= next && (end + behind >= next || (offset < lo && end + PAD >= lo)) {
            // Just below the run's start counts too: the first of two requests
            // the kernel sent at once may reach the daemon second.
            self.run = Some((lo.min(offset), next));
            Step::Within
        } else {
            Step::Jump
        }
    }

    /// Whether no read was seen yet.
    pub fn is_fresh(&self) -> bool {
        self.run.is_none()
    }

    /// A read of this run had to wait for its bytes: the window may be short of
    /// the path's bandwidth-delay product.
    pub fn waited(&mut self) {
        self.waited = true;
    }

    fn adapt(&mut self, read: u64, bs: u64, max: u64, now: Instant) {
        let (since, bytes) = self.epoch.get_or_insert((now, 0));
        *bytes += read;
        if *bytes < self.limit * bs {
            return;
        }
        let secs = now.duration_since(*since).as_secs_f64().max(1e-6);
        let rate = *bytes as f64 / secs;
        // A step in which no read waited measured the reader, not the path.
        if !std::mem::take(&mut self.waited) {
            self.epoch = Some((now, 0));
            return;
        }
        if self.flat < FLAT_STEPS {
            if rate > self.rate * GAIN {
                self.flat = 0;
                self.limit = (self.limit * 2).min(max);
            } else {
                // Measured again at the same limit before it stays.
                self.flat += 1;
            }
        }
        self.rate = self.rate.max(rate);
        self.epoch = Some((now, 0));
    }

    /// Whether the last read was part of a sequential run.
    pub fn sequential(&self) -> bool {
        self.window > 0
    }

    /// The current limit, for tests and metrics.
    #[cfg(test)]
    pub fn limit(&self) -> u64 {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::Duration;

    #[test]
    fn sequential_reads_double_the_window_and_a_jump_resets_it() {
        let mut ra = Readahead::default();
        let t = Instant::now();
        // 1 MiB reads of 1 MiB blocks, from the start, all at once (no rate yet).
        let mb = 1u64 << 20;
        assert_eq!(
            ra.advance(0, mb, mb, 8, 8, t),
            None,
            "one read is no run yet"
        );
        assert_eq!(ra.advance(mb, 2 * mb, mb, 8, 8, t), Some((2, 1)));
        assert_eq!(ra.advance(2 * mb, 3 * mb, mb, 8, 8, t), Some((3, 2)));
        assert_eq!(ra.advance(3 * mb, 4 * mb, mb, 8, 8, t), Some((5, 3)));
        assert_eq!(ra.advance(4 * mb, 5 * mb, mb, 8, 8, t), Some((8, 5)));
        // At the cap, one more block per block read.
        assert_eq!(ra.advance(5 * mb, 6 * mb, mb, 8, 8, t), Some((13, 1)));
        // A jump: nothing ahead, and the window starts over.
        let at = 100 * mb;
        assert_eq!(ra.advance(at, at + 4096, mb, 8, 8, t), None);
        assert!(!ra.sequential());
        assert_eq!(
            ra.advance(at + 4096, at + 8192, mb, 8, 8, t),
            Some((101, 1))
        );
        // A short skip forward (padding) stays sequential.
        assert!(ra.advance(at + 12288, at + 16384, mb, 8, 8, t).is_some());
        assert!(ra.sequential());
    }

    #[test]
    fn a_footer_read_first_and_column_chunks_after_it_fetch_nothing_ahead() {
        // A Parquet reader: the footer at the end, then a few column chunks
        // of each row group, with other columns' chunks between them.
        let (mut ra, t, kb) = (Readahead::default(), Instant::now(), 1u64 << 10);
        let mb = 1 << 20;
        let size = 64 * mb;
        assert_eq!(ra.advance(size - 16 * kb, size, mb, 8, 64, t), None);
        assert_eq!(
            ra.advance(size - 80 * kb, size - 16 * kb, mb, 8, 64, t),
            None
        );
        for rg in 0..8u64 {
            let at = 128 * kb + rg * 7 * mb;
            assert_eq!(ra.advance(at, at + 300 * kb, mb, 8, 64, t), None, "{rg}");
            assert!(!ra.sequential());
        }
        // A gap past the padding is a jump even right after a run's read.
        let at = 8 * mb;
        assert_eq!(ra.advance(at, at + 256 * kb, mb, 8, 64, t), None);
        assert_eq!(ra.advance(at + 400 * kb, at + 600 * kb, mb, 8, 64, t), None);
        assert!(!ra.sequential());
        // Within the padding, it continues: one block ahead of the read.
        assert_eq!(
            ra.advance(at + 650 * kb, at + 900 * kb, mb, 8, 64, t),
            Some((9, 1))
        );
    }

    #[test]
    fn a_window_shrinks_to_a_smaller_share_and_grows_back_to_a_larger() {
        let (mut ra, t, mb) = (Readahead::default(), Instant::now(), 1u64 << 20);
        for i in 0..6 {
            ra.advance(i * mb, (i + 1) * mb, mb, 8, 8, t);
        }
        assert_eq!(ra.window, 8);
        // Three more readers share the budget now: two blocks each.
        assert_eq!(
            ra.advance(6 * mb, 7 * mb, mb, 8, 2, t),
            None,
            "8 ahead already"
        );
        assert_eq!(ra.window, 2);
        for i in 7..13 {
            ra.advance(i * mb, (i + 1) * mb, mb, 8, 2, t);
        }
        assert_eq!(ra.advance(13 * mb, 14 * mb, mb, 8, 2, t), Some((15, 1)));
        // Alone again: the window grows back to the limit it had.
        assert_eq!(ra.advance(14 * mb, 15 * mb, mb, 8, 8, t), Some((16, 3)));
        assert_eq!(ra.window, 4);
    }

    #[test]
    fn a_jump_forward_fetches_nothing_in_the_region_skipped() {
        let (mut ra, t, mb) = (Readahead::default(), Instant::now(), 1u64 << 20);
        for i in 0..6 {
            ra.advance(i * mb, (i + 1) * mb, mb, 8, 8, t);
        }
        assert!(ra.sequential());
        // 20 MiB on: nothing fetched, then a run from there fetches from there.
        assert_eq!(ra.advance(26 * mb, 27 * mb, mb, 8, 8, t), None);
        assert_eq!(ra.advance(27 * mb, 28 * mb, mb, 8, 8, t), Some((28, 1)));
    }

    #[test]
    fn a_scan_whose_first_two_requests_came_swapped_is_one_run() {
        let (mut ra, t, mb) = (Readahead::default(), Instant::now(), 1u64 << 20);
        assert_eq!(ra.advance(mb, 2 * mb, mb, 8, 8, t), None);
        assert_eq!(ra.advance(0, mb, mb, 8, 8, t), None);
        assert_eq!(ra.advance(2 * mb, 3 * mb, mb, 8, 8, t), Some((3, 1)));
        assert!(ra.sequential());
    }

    #[test]
    fn reads_arriving_a_little_out_of_order_stay_one_run() {
        // A window of 2 blocks: the kernel has up to 4 in flight.
        let (mut ra, t, mb) = (Readahead::default(), Instant::now(), 1u64 << 20);
        for i in 0..4 {
            ra.advance(i * mb, (i + 1) * mb, mb, 2, 2, t);
        }
        // Block 5 is served before block 4: both are the same run.
        assert!(ra.advance(5 * mb, 6 * mb, mb, 2, 2, t).is_some());
        ra.advance(4 * mb, 5 * mb, mb, 2, 2, t);
        assert!(ra.sequential(), "a read one block behind is not a jump");
        ra.advance(6 * mb, 7 * mb, mb, 2, 2, t);
        assert!(ra.sequential());
        // Further behind than the kernel reads ahead is a jump.
        ra.advance(0, 4096, mb, 2, 2, t);
        assert!(!ra.sequential());
    }

    /// Reads `n` blocks sequentially from `at`, the path giving `rate(limit)`
    /// bytes/s for a limit, every read waiting for its bytes; returns where it
    /// stopped and the time.
    fn run(ra: &mut Readahead, at: &mut u64, t: &mut Instant, n: u64, rate: impl Fn(u64) -> f64) {
        let mb = 1u64 << 20;
        for _ in 0..n {
            *t += Duration::from_secs_f64(mb as f64 / rate(ra.limit().max(1)));
            ra.advance(*at, *at + mb, mb, 8, 64, *t);
            ra.waited();
            *at += mb;
        }
    }

    #[test]
    fn the_limit_grows_while_throughput_rises_and_settles_when_it_stops() {
        // Throughput proportional to blocks in flight up to 32, flat beyond.
        let path = |limit: u64| 30e6 * limit.min(32) as f64;
        let (mut ra, mut at, mut t) = (Readahead::default(), 0, Instant::now());
        run(&mut ra, &mut at, &mut t, 400, path);
        assert!(ra.limit() >= 32, "grew to the plateau: {}", ra.limit());
        assert!(ra.limit() <= 64);
        // A path that is already at its best with 8 stays at 8 (or one step past).
        let flat = |_: u64| 300e6;
        let (mut ra, mut at, mut t) = (Readahead::default(), 0, Instant::now());
        run(&mut ra, &mut at, &mut t, 400, flat);
        assert!(ra.limit() <= 16, "no growth without gain: {}", ra.limit());
        // A random read starts the window over and keeps the limit learned.
        let learned = ra.limit();
        assert_eq!(ra.advance(0, 4096, 1 << 20, 8, 64, t), None);
        assert!(!ra.sequential());
        assert_eq!(ra.limit(), learned);
        assert_eq!(ra.advance(4096, 8192, 1 << 20, 8, 64, t), Some((1, 1)));
    }

    #[test]
    fn a_path_that_keeps_ahead_of_its_reader_is_not_read_further_ahead() {
        // Throughput rises with the limit (a busy host's noise, say), but no
        // read ever waits for its bytes: the limit stays where it started.
        let (mut ra, mut t, mb) = (Readahead::default(), Instant::now(), 1u64 << 20);
        for i in 0..400u64 {
            let rate = 30e6 * ra.limit().max(1) as f64;
            t += Duration::from_secs_f64(mb as f64 / rate);
            ra.advance(i * mb, (i + 1) * mb, mb, 8, 64, t);
        }
        assert_eq!(ra.limit(), 8);
        // Once reads wait, it grows.
        for i in 400..800u64 {
            let rate = 30e6 * ra.limit().min(32) as f64;
            t += Duration::from_secs_f64(mb as f64 / rate);
            ra.advance(i * mb, (i + 1) * mb, mb, 8, 64, t);
            ra.waited();
        }
        assert!(ra.limit() >= 32, "{}", ra.limit());
    }

    #[test]
    fn one_slow_step_does_not_end_the_growth() {
        // The path of the test above, but the step measured at 16 blocks comes
        // out slow once (a busy host): the limit still reaches the plateau.
        let (mut ra, mut at, mut t) = (Readahead::default(), 0u64, Instant::now());
        let mb = 1u64 << 20;
        let mut slow_until = None;
        for _ in 0..400 {
            let limit = ra.limit().max(1);
            let mut rate = 30e6 * limit.min(32) as f64;
            if limit == 16 {
                // The first 16 MiB read at this limit: one step's measure.
                let until = *slow_until.get_or_insert(at + 16 * mb);
                if at < until {
                    rate /= 3.0;
                }
            }
            t += Duration::from_secs_f64(mb as f64 / rate);
            ra.advance(at, at + mb, mb, 8, 64, t);
            ra.waited();
            at += mb;
        }
        assert!(ra.limit() >= 32, "grew past the slow step: {}", ra.limit());
    }

    #[test]
    fn a_direct_run_reads_ahead_an_eighth_of_what_it_read() {
        let (t, mb) = (Instant::now(), 1u64 << 20);
        let mut ra = Readahead::new(true);
        // A column chunk of 8.5 MiB read whole at an odd offset, in the
        // pieces the kernel sends one after another: one block ahead at most.
        let at = 3 * mb + 4096;
        for i in 0..9 {
            ra.advance(at + i * mb, at + (i + 1) * mb, mb, 8, 64, t);
        }
        // Blocks 3..=12 hold the chunk: block 13 is the one fetched past it.
        assert_eq!(ra.fetched_until, 14);
        // A run that goes on (a copy of the file) reads further ahead.
        for i in 9..64 {
            ra.advance(at + i * mb, at + (i + 1) * mb, mb, 8, 64, t);
        }
        assert_eq!(ra.window, 8, "after 64 MiB");
        // Three columns of a row group read one after another: no scan.
        let mut cols = Readahead::new(true);
        for (lo, hi) in [(0, 64 << 10), (64 << 10, 192 << 10), (192 << 10, 320 << 10)] {
            assert_eq!(cols.advance(4 * mb + lo, 4 * mb + hi, mb, 8, 64, t), None);
        }
        // Through the page cache the same reads double the window as ever.
        let mut cached = Readahead::new(false);
        let grown: u64 = (0..6)
            .filter_map(|i| cached.advance(i * mb, (i + 1) * mb, mb, 8, 64, t))
            .map(|(_, n)| n)
            .sum();
        assert!(grown > 9, "{grown}");
    }
}
