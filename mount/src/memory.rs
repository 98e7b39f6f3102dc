//! A mount held to a memory limit (`--memory-limit`, a CSI volume's
//! `memoryLimit`): everything a mount holds per request is counted against it,
//! so that a mount under a cgroup's `MemoryMax=` of that size is never
//! OOM-killed, however many readers it serves. What does not fit waits.
//!
//! Of the limit, a quarter (at least 112 MiB) is left for what no request
//! holds: the program and its threads' stacks, the FUSE readers' request
//! buffers (4 of 68 KiB), idle connections' head buffers, metadata and
//! listings, and allocator slack. The rest is shared by what requests hold,
//! each bounded on its own so that none can take another's share:
//! - blocks in flight, a third: each fetch takes its buffer only once it holds
//!   one of these slots, and with it the connection's buffers it reads through
//!   ([`CONNECTION`]): a block is read into its buffer from a node's socket
//!   directly, but an origin over TLS goes through hyper's read buffer;
//! - FUSE replies being made, an eighth: a read takes its size of this before
//!   anything else, for the pipe its bytes are spliced through or the buffer
//!   they are copied into, or the block it was answered from should the RAM
//!   tier let it go meanwhile; reads past it wait, holding nothing;
//! - with a disk tier, the blocks queued for it
//!   ([`shoal::blocks::tiers::DISK_QUEUE`]);
//! - the RAM tier, the rest (which also holds what was fetched ahead until it
//!   is read; each open file's read-ahead is a share of the in-flight slots, so
//!   readers together never fetch ahead more than it keeps for them).
//!
//! Measured in a memory cgroup of 256 MiB (`tests/suite/memory_limit.rs`), a
//! mount reading for 16 or 64 readers peaks at 80 to 100 MiB, its RAM tier
//! full: the reserve is rarely needed whole, which is what keeps the cgroup
//! clear of its limit (each time a cgroup meets it, the kernel reclaims or
//! kills).

use shoal::blocks::tiers::DISK_QUEUE;

/// Bytes of the limit not given to requests: at least this much.
const RESERVE_MIN: u64 = 112 << 20;
/// The least a limit may be: the reserve and a few blocks.
pub const LIMIT_MIN: u64 = 160 << 20;
/// What one connection may hold while it reads a block: hyper's read buffer
/// at its largest (8 KiB and 100 pages) and TLS records on either side.
pub const CONNECTION: u64 = 448 << 10;
/// The largest FUSE reply a read takes (the kernel's 256 pages per request).
pub const REPLY: u64 = 1 << 20;

/// What a limit allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    /// The RAM tier's capacity.
    pub ram: u64,
    /// Blocks fetched at once across every reader.
    pub inflight_blocks: usize,
    /// Blocks a sequential reader asks for ahead of it.
    pub read_window: usize,
    /// Bytes of FUSE replies being made at once.
    pub replies: u64,
}

impl Budgets {
    /// The budgets under `limit` for blocks of `block_size`, never above what
    /// the config asked for (`ram`, `read_window`); `disk`: the mount has a
    /// disk tier.
    pub fn derive(
        limit: u64,
        block_size: u64,
        ram: u64,
        read_window: usize,
        disk: bool,
    ) -> Result<Budgets, String> {
        if limit < LIMIT_MIN {
            return Err(format!(
                "a memory limit of {limit} bytes is below the least a mount runs in ({} MiB)",
                LIMIT_MIN >> 20
            ));
        }
        let shared = limit - (limit / 4).max(RESERVE_MIN);
        let block_size = block_size.max(1);
        let slot = block_size + CONNECTION;
        let inflight = ((shared / 3) / slot).clamp(2, (read_window as u64 * 8).max(2));
        let replies = (shared / 8).max(2 * REPLY) / REPLY * REPLY;
        let queued = if disk { DISK_QUEUE as u64 } else { 0 } * block_size;
        let held = inflight * slot + replies + queued;
        if shared < held + block_size {
            return Err(format!(
                "a memory limit of {limit} bytes leaves no room for blocks of {block_size} bytes"
            ));
        }
        Ok(Budgets {
            ram: ram.min(shared - held),
            inflight_blocks: inflight as usize,
            read_window: read_window.min((inflight as usize / 2).max(1)),
            replies,
        })
    }
}

/// The host's memory, from /proc/meminfo.
pub fn host_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// The limit of a mount given none: an eighth of the host's memory, between
/// 256 MiB and 4 GiB (1 GiB if the host's memory cannot be read).
pub fn default_limit(host: Option<u64>) -> u64 {
    host.map_or(1 << 30, |h| (h / 8).clamp(256 << 20, 4 << 30))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_limit_bounds_every_budget_and_what_is_left_covers_the_rest() {
        let b = Budgets::derive(256 * MIB, MIB, 256 * MIB, 8, false).unwrap();
        assert_eq!(
            (b.inflight_blocks, b.read_window, b.replies),
            (33, 8, 18 * MIB)
        );
        // The tier, the blocks in flight with their connections, the replies
        // and the reserve: the limit, no more.
        let slot = MIB + CONNECTION;
        assert_eq!(b.ram + 33 * slot + b.replies + RESERVE_MIN, 256 * MIB);
        assert!(b.ram > 64 * MIB, "{b:?}");
        // A disk tier's queue comes out of the RAM tier.
        let d = Budgets::derive(256 * MIB, MIB, 256 * MIB, 8, true).unwrap();
        assert_eq!(d.ram + DISK_QUEUE as u64 * MIB, b.ram);
        let small = Budgets::derive(LIMIT_MIN, MIB, 256 * MIB, 64, false).unwrap();
        assert_eq!(
            (small.inflight_blocks, small.read_window, small.replies),
            (11, 5, 6 * MIB)
        );
        assert!(small.ram >= MIB, "{small:?}");
        // Never more than the config asked for.
        let asked = Budgets::derive(4096 * MIB, MIB, 100 * MIB, 4, false).unwrap();
        assert_eq!(
            (asked.ram, asked.inflight_blocks, asked.read_window),
            (100 * MIB, 32, 4)
        );
        // Blocks larger than what a limit holds: an error naming both.
        assert!(Budgets::derive(LIMIT_MIN, 32 * MIB, 256 * MIB, 8, false).is_err());
        assert!(Budgets::derive(MIB, MIB, MIB, 8, false).is_err());
    }

    #[test]
    fn a_mount_given_no_limit_takes_an_eighth_of_the_host() {
        assert_eq!(default_limit(Some(16 << 30)), 2 << 30);
        assert_eq!(default_limit(Some(1 << 30)), 256 * MIB);
        assert_eq!(default_limit(Some(512 << 30)), 4 << 30);
        assert_eq!(default_limit(None), 1 << 30);
        assert!(host_memory().is_some_and(|m| m > 0));
    }
}
