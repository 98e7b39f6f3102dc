//! Block buffers and the C heap: blocks are allocated and freed by the megabyte.
//! glibc raises its mmap threshold each time such a buffer is freed, after which
//! blocks come from the heap arenas, which fragment under many threads and keep
//! what they once held: a mount measured 197 MiB at its peak where the same reads
//! with a fixed threshold peaked at 76 MiB. A fixed threshold keeps every block in
//! its own mapping, returned to the system when it is freed.

/// Allocations at least this large get their own mapping.
const MMAP_THRESHOLD: i32 = 256 << 10;

/// Fixes the allocator's mmap threshold (where the allocator is glibc's); a
/// service calls this once at start, before its threads.
pub fn map_large_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes the allocator's parameters.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}
