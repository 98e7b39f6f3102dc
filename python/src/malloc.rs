//! The C allocator's thresholds for a reading process: large buffers (the
//! RAM tier's blocks, the bytes objects each read hands over) taken from and
//! given back to the heap, not mapped and unmapped each time.
//!
//! glibc maps every allocation past its mmap threshold on its own and unmaps it
//! when freed, and returns the heap's free top to the system past its trim
//! threshold. Both start low (128 KiB) and rise only as large mapped chunks are
//! freed, so a reader's buffers of 1 to 8 MiB keep landing on fresh pages: a
//! warm 1 GiB read in 8 MiB reads took 53,000 to 74,000 page faults (one per
//! 4 KiB page the kernel zeroes, and on a VM that hands freed pages back to its
//! host, one fault there too), 28,700 with the thresholds below, and 50 to 90
//! ms less CPU (docs: Python, "Memory of a process"). The values are the top of
//! glibc's own adjustment (its mmap threshold stops rising at 32 MiB, the trim
//! threshold at twice that), set from the start. A process that chose its own
//! (`GLIBC_TUNABLES`, `MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`) keeps
//! them.

/// Past this, an allocation is mapped on its own (glibc's highest on 64 bits).
const MMAP_THRESHOLD: i32 = 32 << 20;
/// A free heap top past this goes back to the system.
const TRIM_THRESHOLD: i32 = 64 << 20;

/// Sets the thresholds once per process, unless the environment chose them.
pub fn tune() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if chosen(|k| std::env::var_os(k)) {
            return;
        }
        set();
    });
}

/// Whether the environment (read by `var`) sets glibc's malloc thresholds.
fn chosen(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> bool {
    let tunables =
        var("GLIBC_TUNABLES").is_some_and(|t| t.to_string_lossy().contains("glibc.malloc."));
    tunables
        || ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"]
            .iter()
            .any(|k| var(k).is_some())
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set() {
    // SAFETY: mallopt only sets the allocator's parameters; it takes the
    // arenas' locks itself.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}

/// Other C libraries (musl) have no such thresholds to set.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set() {}
