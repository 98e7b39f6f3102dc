//! Block buffers and the C heap: blocks are allocated and freed by the megabyte,
//! from many threads. glibc gives each thread that meets contention an arena of
//! its own (up to eight per CPU), and a freed block stays resident in the arena
//! that held it, so the peak grows with the arenas: a mount reading with 32
//! readers peaked at 163-197 MiB with glibc's defaults and at 103-113 MiB with one
//! arena. Giving every block its own mapping instead (a fixed mmap threshold) bounds
//! memory as well but costs a page fault per 4 KiB of every block: warm reads
//! through the mount ran at half the speed.

/// CPUs per arena: fewer arenas hold less; more spread the lock.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const CPUS_PER_ARENA: usize = 4;

/// Caps the allocator's arenas (where the allocator is glibc's) at one per
/// [`CPUS_PER_ARENA`] CPUs; a service calls this once at start, before its
/// threads. `MALLOC_ARENA_MAX` in the environment still decides when set.
pub fn fewer_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let arenas = cpus.div_ceil(CPUS_PER_ARENA) as i32;
        // SAFETY: mallopt only changes the allocator's parameters.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, arenas);
        }
    }
}
