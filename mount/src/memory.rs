//! A mount held to a memory limit (`--memory-limit`, a CSI volume's
//! `memoryLimit`): the RAM tier, the blocks in flight and the read window are
//! derived from it, so that a mount under a cgroup's `MemoryMax=` is never
//! OOM-killed by its own caches, however many readers it serves.
//!
//! Of the limit, a quarter (at least 112 MiB) is left for what is not blocks:
//! the program, its threads' stacks, FUSE request and reply buffers, connections,
//! metadata, listings and allocator slack (60 to 80 MiB over a mount's 20 at rest
//! under 32 readers, in `tests/suite/memory.rs`).
//! Of the rest, a third may be in flight (fetches being filled) and the other two
//! thirds are the RAM tier (which also holds what was fetched ahead until it is
//! read). A block being filled is a buffer of its own until it enters the tier,
//! where it may push another out only then: the two are counted apart.

/// Bytes of the limit not given to blocks: at least this much.
const RESERVE_MIN: u64 = 112 << 20;
/// The least a limit may be: the reserve and a few blocks.
pub const LIMIT_MIN: u64 = 160 << 20;

/// What a limit allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    /// The RAM tier's capacity.
    pub ram: u64,
    /// Blocks fetched at once across every reader.
    pub inflight_blocks: usize,
    /// Blocks a sequential reader asks for ahead of it.
    pub read_window: usize,
}

impl Budgets {
    /// The budgets under `limit` for blocks of `block_size`, never above what
    /// the config asked for (`ram`, `read_window`).
    pub fn derive(
        limit: u64,
        block_size: u64,
        ram: u64,
        read_window: usize,
    ) -> Result<Budgets, String> {
        if limit < LIMIT_MIN {
            return Err(format!(
                "a memory limit of {limit} bytes is below the least a mount runs in ({} MiB)",
                LIMIT_MIN >> 20
            ));
        }
        let blocks = limit - (limit / 4).max(RESERVE_MIN);
        let block_size = block_size.max(1);
        let inflight = ((blocks / 3) / block_size).clamp(2, (read_window as u64 * 8).max(2));
        if blocks < (inflight + 1) * block_size {
            return Err(format!(
                "a memory limit of {limit} bytes leaves no room for blocks of {block_size} bytes"
            ));
        }
        Ok(Budgets {
            ram: ram.min(blocks - inflight * block_size),
            inflight_blocks: inflight as usize,
            read_window: read_window.min((inflight as usize / 2).max(1)),
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
        let b = Budgets::derive(256 * MIB, MIB, 256 * MIB, 8).unwrap();
        assert_eq!((b.ram, b.inflight_blocks, b.read_window), (96 * MIB, 48, 8));
        // The tier, the blocks in flight and the reserve: the limit, no more.
        assert_eq!(b.ram + 48 * MIB + RESERVE_MIN, 256 * MIB);
        let small = Budgets::derive(LIMIT_MIN, MIB, 256 * MIB, 64).unwrap();
        assert_eq!(
            (small.ram, small.inflight_blocks, small.read_window),
            (32 * MIB, 16, 8)
        );
        // Never more than the config asked for.
        let asked = Budgets::derive(4096 * MIB, MIB, 100 * MIB, 4).unwrap();
        assert_eq!(
            (asked.ram, asked.inflight_blocks, asked.read_window),
            (100 * MIB, 32, 4)
        );
        // Blocks larger than what a limit holds: an error naming both.
        assert!(Budgets::derive(LIMIT_MIN, 32 * MIB, 256 * MIB, 8).is_err());
        assert!(Budgets::derive(MIB, MIB, MIB, 8).is_err());
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
