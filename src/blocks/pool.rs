//! [`BufferPool`]: block-sized buffers used again instead of allocated anew.
//!
//! A block arrives into one buffer and leaves in slices of it (to the tiers, to a
//! FUSE reply, to an HTTP answer). A fresh buffer per block costs its page faults
//! and the kernel's zeroing of every page, as much again as the copy that fills
//! it; a buffer whose last slice is gone goes back to its pool, and the next block
//! of that size is read into memory that is already there. The pool keeps at most
//! `max_idle` buffers unused, so what it holds on top of the tiers and the blocks
//! in flight is bounded.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Buffers of one size, taken and given back.
#[derive(Clone)]
pub struct BufferPool(Arc<Inner>);

struct Inner {
    size: usize,
    max_idle: usize,
    idle: Mutex<Vec<Box<[u8]>>>,
    allocated: AtomicU64,
    reused: AtomicU64,
}

/// How a pool was used, since it was made.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Buffers allocated because none was idle.
    pub allocated: u64,
    /// Buffers taken from the idle ones.
    pub reused: u64,
    /// Buffers idle now.
    pub idle: usize,
}

/// A buffer of `len` bytes, from a pool or of its own. Its bytes are always
/// initialised (zeroed when new, a former block's when reused). Held as a raw
/// pointer, not a `Box`, because [`crate::blocks::growing`] writes one part of it
/// while readers hold slices of another.
pub struct Buffer {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    pool: Option<Arc<Inner>>,
}

// SAFETY: a Buffer owns its memory as a Box would; who may touch which bytes is
// `growing`'s business.
unsafe impl Send for Buffer {}
unsafe impl Sync for Buffer {}

impl BufferPool {
    /// Buffers of `size` bytes; at most `max_idle` kept unused.
    pub fn new(size: usize, max_idle: usize) -> BufferPool {
        BufferPool(Arc::new(Inner {
            size,
            max_idle,
            idle: Mutex::new(Vec::new()),
            allocated: AtomicU64::new(0),
            reused: AtomicU64::new(0),
        }))
    }

    /// A buffer of `len` bytes: an idle one of the pool's size when `len` is that
    /// size, else one made for it (not kept afterwards).
    pub fn take(&self, len: usize) -> Buffer {
        if len != self.0.size {
            return Buffer::unpooled(len);
        }
        let idle = self.0.idle.lock().unwrap().pop();
        let mem = match idle {
            Some(mem) => {
                self.0.reused.fetch_add(1, Relaxed);
                mem
            }
            None => {
                self.0.allocated.fetch_add(1, Relaxed);
                zeroed(len)
            }
        };
        Buffer::from_box(mem, Some(self.0.clone()))
    }

    pub fn stats(&self) -> PoolStats {
        PoolStats {
            allocated: self.0.allocated.load(Relaxed),
            reused: self.0.reused.load(Relaxed),
            idle: self.0.idle.lock().unwrap().len(),
        }
    }
}

/// Zeroed memory the kernel maps on first touch (calloc), not written here.
fn zeroed(len: usize) -> Box<[u8]> {
    vec![0u8; len].into_boxed_slice()
}

impl Buffer {
    /// A buffer of `len` bytes outside any pool.
    pub fn unpooled(len: usize) -> Buffer {
        Buffer::from_box(zeroed(len), None)
    }

    fn from_box(mem: Box<[u8]>, pool: Option<Arc<Inner>>) -> Buffer {
        let len = mem.len();
        let raw = Box::into_raw(mem) as *mut u8;
        Buffer {
            // A boxed slice's pointer is never null (dangling but aligned when empty).
            ptr: std::ptr::NonNull::new(raw).expect("a box is never null"),
            len,
            pool,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memory, to be read and written through [`crate::blocks::growing`] only.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: the pointer and length came from `Box::into_raw` of a boxed
        // slice, and nothing refers to the memory once its Buffer drops.
        let mem = unsafe {
            Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.ptr.as_ptr(),
                self.len,
            ))
        };
        let Some(pool) = self.pool.take() else {
            return;
        };
        let mut idle = pool.idle.lock().unwrap();
        if idle.len() < pool.max_idle {
            idle.push(mem);
            return;
        }
        // Freed outside the lock: giving a large buffer back to the system may
        // take a system call.
        drop(idle);
        drop(mem);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_and_are_used_again_up_to_the_idle_bound() {
        let pool = BufferPool::new(4096, 2);
        let bufs: Vec<Buffer> = (0..3).map(|_| pool.take(4096)).collect();
        assert_eq!(pool.stats().allocated, 3);
        drop(bufs);
        // Two kept, the third freed.
        assert_eq!(pool.stats().idle, 2);
        let a = pool.take(4096);
        let b = pool.take(4096);
        let c = pool.take(4096);
        let s = pool.stats();
        assert_eq!((s.reused, s.allocated, s.idle), (2, 4, 0));
        drop((a, b, c));
        // Another size is made for the asker and never kept.
        let odd = pool.take(100);
        assert_eq!(odd.len(), 100);
        drop(odd);
        assert_eq!(pool.stats().idle, 2);
    }
}
