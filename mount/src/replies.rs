//! [`Replies`]: the memory of the FUSE replies being made, bounded. A read
//! takes its size of it before anything else and gives it back once its
//! answer is sent: the pipe its bytes are spliced through, the buffer they are
//! copied into when they cannot be, or the block it was answered from should
//! the RAM tier let that go meanwhile. Reads past the bound wait their turn,
//! holding nothing.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Replies are counted in pages.
const PAGE: u64 = 4096;

#[derive(Clone, Default)]
pub struct Replies {
    /// Pages of replies that may be in the making (`None`: no bound).
    pages: Option<Arc<Semaphore>>,
    total: u32,
}

/// One reply's share, given back when dropped.
pub struct Lease(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

impl Replies {
    /// Replies of `bytes` in all at once (`None`: any number).
    pub fn new(bytes: Option<u64>) -> Replies {
        let total = bytes.map_or(0, |b| (b / PAGE).clamp(1, u32::MAX as u64) as u32);
        Replies {
            pages: bytes.map(|_| Arc::new(Semaphore::new(total as usize))),
            total,
        }
    }

    /// Waits until a reply of `size` bytes fits, in turn, and takes its share.
    pub async fn lease(&self, size: u32) -> Lease {
        let Some(pages) = &self.pages else {
            return Lease(None);
        };
        let n = (size as u64).div_ceil(PAGE).clamp(1, self.total as u64) as u32;
        // The semaphore is never closed.
        Lease(pages.clone().acquire_many_owned(n).await.ok())
    }

    /// Pages free now (all of them when idle), for tests.
    pub fn free_pages(&self) -> Option<usize> {
        self.pages.as_ref().map(|p| p.available_permits())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_reply_past_the_bound_waits_for_one_to_be_sent() {
        let r = Replies::new(Some(2 << 20));
        let a = r.lease(1 << 20).await;
        let b = r.lease(1 << 20).await;
        assert_eq!(r.free_pages(), Some(0));
        let third = tokio::spawn({
            let r = r.clone();
            async move { r.lease(4096).await }
        });
        tokio::task::yield_now().await;
        assert!(!third.is_finished(), "a reply past the bound waits");
        drop(a);
        let c = third.await.unwrap();
        assert_eq!(r.free_pages(), Some(255));
        drop((b, c));
        assert_eq!(r.free_pages(), Some(512));
        // Larger than the whole bound: it takes all of it, and still runs.
        let whole = r.lease(u32::MAX).await;
        assert_eq!(r.free_pages(), Some(0));
        drop(whole);
        // No bound: nothing waits, nothing is counted.
        let free = Replies::new(None);
        let _l = free.lease(1 << 20).await;
        assert_eq!(free.free_pages(), None);
    }
}
