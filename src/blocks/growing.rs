//! A block being fetched, readable while it arrives: one buffer that the fetch
//! fills from its start ([`Filler`], the only writer) and every asker reads as
//! slices of what has arrived ([`Growing`]). A cold read's first byte is so the
//! origin's first byte plus one hop instead of a whole block's transfer, and the
//! block's bytes are written once: the slices handed out, and the whole block the
//! tiers keep, all share the buffer the socket was read into.
//!
//! A reader never sees bytes past what has arrived; the fetch's error ends every
//! reader. The buffer goes back to its pool once the growing block and every
//! slice of it are gone. A block made [`Growing::lazy`] takes its buffer from
//! its pool only when its first bytes are written: a fetch waiting for its turn
//! (a slot of the reader's in-flight budget) holds no memory.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::Stream;
use tokio::sync::watch;

use super::pool::{Buffer, BufferPool};

/// A block as its askers read it.
pub struct Growing<E> {
    /// Set before the first byte is written, and never again.
    buf: std::sync::OnceLock<Buffer>,
    /// How long the block may grow.
    cap: usize,
    /// Bytes `0..filled` are written and never written again; only the
    /// [`Filler`] writes, and only at `filled..`.
    filled: AtomicUsize,
    end: Mutex<Option<Result<(), E>>>,
    /// Bumped on every change; readers wait on it.
    changed: watch::Sender<u64>,
    /// Cleared when the block's bytes are kept elsewhere already (a kernel's
    /// page cache took it whole): the RAM tier need not keep it when it lands.
    keep: std::sync::atomic::AtomicBool,
}

/// The one writer of a [`Growing`] block: appends at its end.
pub struct Filler<E> {
    g: Arc<Growing<E>>,
    /// Where the buffer comes from, for a block that has none yet.
    pool: Option<BufferPool>,
}

/// What a slice of a growing block holds on to: the block (its buffer), and how
/// much of it the slice may see.
struct View<E> {
    g: Arc<Growing<E>>,
    len: usize,
}

impl<E> AsRef<[u8]> for View<E> {
    fn as_ref(&self) -> &[u8] {
        let Some(buf) = self.g.buf.get() else {
            return &[];
        };
        // SAFETY: `len` was at most `filled` when the view was made; bytes below
        // `filled` are initialised and never written again, and the buffer lives
        // as long as `g`.
        unsafe { std::slice::from_raw_parts(buf.as_ptr(), self.len) }
    }
}

impl<E: Clone + Send + Sync + 'static> Growing<E> {
    /// A block to be filled into `buf`, and its writer.
    pub fn new(buf: Buffer) -> (Arc<Growing<E>>, Filler<E>) {
        let cap = buf.len();
        Self::made(std::sync::OnceLock::from(buf), cap, None)
    }

    /// A block of up to `len` bytes whose buffer is taken from `pool` when its
    /// first bytes are written.
    pub fn lazy(pool: &BufferPool, len: usize) -> (Arc<Growing<E>>, Filler<E>) {
        Self::made(std::sync::OnceLock::new(), len, Some(pool.clone()))
    }

    fn made(
        buf: std::sync::OnceLock<Buffer>,
        cap: usize,
        pool: Option<BufferPool>,
    ) -> (Arc<Growing<E>>, Filler<E>) {
        let g = Arc::new(Growing {
            buf,
            cap,
            filled: AtomicUsize::new(0),
            end: Mutex::new(None),
            changed: watch::channel(0).0,
            keep: std::sync::atomic::AtomicBool::new(true),
        });
        (g.clone(), Filler { g, pool })
    }

    /// Whether the block holds a buffer yet.
    pub fn has_buffer(&self) -> bool {
        self.buf.get().is_some()
    }

    /// Bytes arrived so far.
    pub fn len(&self) -> u64 {
        self.filled.load(Ordering::Acquire) as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How long the block may grow.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Bytes `lo..hi` of what has arrived, sharing the block's buffer.
    ///
    /// # Panics
    /// If `hi` is past what has arrived, or `lo > hi`.
    pub fn slice(self: &Arc<Self>, lo: usize, hi: usize) -> Bytes {
        let filled = self.filled.load(Ordering::Acquire);
        assert!(lo <= hi && hi <= filled, "{lo}..{hi} of {filled} arrived");
        if lo == hi {
            return Bytes::new();
        }
        Bytes::from_owner(View {
            g: self.clone(),
            len: hi,
        })
        .slice(lo..)
    }

    /// Ends the block: readers finish (`Ok`) or fail with `e`. The first end
    /// stands.
    pub fn finish(&self, r: Result<(), E>) {
        self.end.lock().unwrap().get_or_insert(r);
        self.changed.send_modify(|v| *v += 1);
    }

    /// The block's bytes are kept elsewhere: the RAM tier need not keep it.
    pub fn let_go(&self) {
        self.keep.store(false, Ordering::Relaxed);
    }

    /// Whether the RAM tier should keep the block once it lands.
    pub fn keeps(&self) -> bool {
        self.keep.load(Ordering::Relaxed)
    }

    /// Whether the fetch has ended, well or not.
    pub fn is_done(&self) -> bool {
        self.end.lock().unwrap().is_some()
    }

    /// What has arrived, whole, for the tiers once the fetch has ended well: the
    /// buffer itself, or a copy of just the bytes when they fill little of it (a
    /// block shorter than asked for must not hold a whole block's memory).
    pub fn arrived(self: &Arc<Self>) -> Bytes {
        let n = self.len() as usize;
        if n >= self.capacity() / 4 * 3 {
            self.slice(0, n)
        } else {
            Bytes::copy_from_slice(&self.slice(0, n))
        }
    }

    /// Waits until `n` bytes have arrived or the fetch has ended; the fetch's
    /// error if it failed before they did. A fetch that ended well with fewer is
    /// `Ok` too: the block is shorter.
    pub async fn until(&self, n: u64) -> Result<(), E> {
        let mut rx = self.changed.subscribe();
        loop {
            if self.len() >= n {
                return Ok(());
            }
            if let Some(end) = self.end.lock().unwrap().clone() {
                // Bytes may have come with the end.
                return if self.len() >= n { Ok(()) } else { end };
            }
            if rx.changed().await.is_err() {
                unreachable!("a growing block outlived its own sender");
            }
        }
    }

    /// The whole block once the fetch has ended, or its error.
    pub async fn whole(self: &Arc<Self>) -> Result<Bytes, E> {
        self.until(u64::MAX).await.map(|()| self.arrived())
    }

    /// Waits until the first bytes are here or the fetch ended; the fetch's
    /// error if it failed before sending anything (an answer, not a cut body).
    pub async fn started(&self) -> Result<(), E> {
        match self.until(1).await {
            Err(e) if self.is_empty() => Err(e),
            _ => Ok(()),
        }
    }

    /// The block from its first byte, in slices as its bytes arrive, then the
    /// fetch's error if it failed.
    pub fn stream(self: Arc<Self>) -> impl Stream<Item = Result<Bytes, E>> + Send {
        let rx = self.changed.subscribe();
        futures_util::stream::unfold(
            (self, rx, 0usize, false),
            |(g, mut rx, sent, done)| async move {
                if done {
                    return None;
                }
                loop {
                    let filled = g.len() as usize;
                    if filled > sent {
                        let part = g.slice(sent, filled);
                        return Some((Ok(part), (g, rx, filled, false)));
                    }
                    let end = g.end.lock().unwrap().clone();
                    match end {
                        // Nothing came after the last look: done.
                        Some(Ok(())) if g.len() as usize == sent => return None,
                        Some(Ok(())) => continue,
                        Some(Err(e)) if g.len() as usize == sent => {
                            return Some((Err(e), (g, rx, sent, true)))
                        }
                        Some(Err(_)) => continue,
                        None => {}
                    }
                    if rx.changed().await.is_err() {
                        return None;
                    }
                }
            },
        )
    }
}

impl<E: Clone + Send + Sync + 'static> Filler<E> {
    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.g.filled.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes that may still be written.
    pub fn remaining(&self) -> usize {
        self.g.capacity() - self.len()
    }

    /// The room after what was written, to read the next bytes into; they count
    /// once [`commit`](Self::commit)ted.
    pub fn spare(&mut self) -> &mut [u8] {
        let filled = self.len();
        let cap = self.g.capacity();
        if filled == cap {
            return &mut [];
        }
        let pool = &mut self.pool;
        let buf = self.g.buf.get_or_init(|| match pool.take() {
            Some(p) => p.take(cap),
            None => Buffer::unpooled(cap),
        });
        // SAFETY: this Filler is the block's only writer and `&mut self` keeps
        // this slice its only one; readers see only bytes below `filled`, which
        // the slice starts past. The memory is initialised (see `Buffer`).
        unsafe { std::slice::from_raw_parts_mut(buf.as_ptr().add(filled), cap - filled) }
    }

    /// The next `n` bytes of [`spare`](Self::spare) are written: readers may see
    /// them.
    pub fn commit(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        let filled = self.len() + n;
        assert!(filled <= self.g.capacity(), "committed past the buffer");
        self.g.filled.store(filled, Ordering::Release);
        self.g.changed.send_modify(|v| *v += 1);
    }

    /// Appends a copy of `b`; an error (and nothing written) if it does not fit.
    pub fn push(&mut self, b: &[u8]) -> Result<(), Overflow> {
        let spare = self.spare();
        if b.len() > spare.len() {
            return Err(Overflow {
                room: spare.len(),
                got: b.len(),
            });
        }
        spare[..b.len()].copy_from_slice(b);
        self.commit(b.len());
        Ok(())
    }
}

/// Bytes that did not fit in the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{got} bytes came with room for {room}")]
pub struct Overflow {
    pub room: usize,
    pub got: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::pool::BufferPool;
    use futures_util::StreamExt;

    fn block(cap: usize) -> (Arc<Growing<String>>, Filler<String>) {
        Growing::new(Buffer::unpooled(cap))
    }

    #[tokio::test]
    async fn readers_see_bytes_as_they_come_and_then_the_end() {
        let (g, mut f) = block(4);
        let early = tokio::spawn(g.clone().stream().collect::<Vec<_>>());
        f.push(b"ab").unwrap();
        g.started().await.unwrap();
        assert_eq!(g.slice(0, 2), "ab");
        let mid = g.clone().stream();
        // Written in place, as a socket read would.
        f.spare()[..2].copy_from_slice(b"cd");
        f.commit(2);
        g.finish(Ok(()));
        let late: Vec<_> = g.clone().stream().collect().await;
        for got in [early.await.unwrap(), mid.collect().await, late] {
            let bytes: Vec<u8> = got.into_iter().flat_map(|c| c.unwrap().to_vec()).collect();
            assert_eq!(bytes, b"abcd");
        }
        assert_eq!(g.whole().await.unwrap(), "abcd");
        assert_eq!(f.push(b"e"), Err(Overflow { room: 0, got: 1 }));
    }

    #[tokio::test]
    async fn a_reader_waits_for_its_range_only() {
        let (g, mut f) = block(8);
        let g2 = g.clone();
        let reader = tokio::spawn(async move {
            g2.until(3).await.unwrap();
            g2.slice(1, 3)
        });
        f.push(b"ab").unwrap();
        tokio::task::yield_now().await;
        assert!(!reader.is_finished());
        f.push(b"cd").unwrap();
        assert_eq!(reader.await.unwrap(), "bc");
        // A block that ends short: a wait past its end returns, with what came.
        g.finish(Ok(()));
        g.until(8).await.unwrap();
        assert_eq!(g.len(), 4);
    }

    #[tokio::test]
    async fn an_error_before_any_byte_is_an_answer_and_after_one_ends_the_stream() {
        let (g, _f) = block(4);
        g.finish(Err("412".into()));
        assert_eq!(g.started().await, Err("412".into()));

        let (g, mut f) = block(4);
        f.push(b"x").unwrap();
        g.finish(Err("cut".into()));
        assert!(g.started().await.is_ok());
        assert_eq!(g.until(4).await, Err("cut".into()));
        let got: Vec<_> = g.clone().stream().collect().await;
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].as_ref().unwrap(), "x");
        assert!(got[1].is_err());
    }

    #[tokio::test]
    async fn the_buffer_goes_back_once_the_last_slice_is_gone() {
        let pool = BufferPool::new(4, 4);
        let (g, mut f) = Growing::<String>::new(pool.take(4));
        f.push(b"abcd").unwrap();
        g.finish(Ok(()));
        let whole = g.whole().await.unwrap();
        let part = g.slice(1, 2);
        drop((g, f, whole));
        assert_eq!(pool.stats().idle, 0, "a slice still holds it");
        assert_eq!(part, "b");
        drop(part);
        assert_eq!(pool.stats().idle, 1);
        // Used again: the next block is read into the same memory.
        let (g, _f) = Growing::<String>::new(pool.take(4));
        assert_eq!(pool.stats().reused, 1);
        drop(g);
    }

    #[tokio::test]
    async fn a_lazy_block_takes_its_buffer_with_its_first_bytes() {
        let pool = BufferPool::new(4, 4);
        let (g, mut f) = Growing::<String>::lazy(&pool, 4);
        assert!(!g.has_buffer());
        assert_eq!((g.capacity(), f.remaining()), (4, 4));
        assert_eq!(pool.stats().allocated, 0, "no memory before a byte");
        f.push(b"ab").unwrap();
        assert!(g.has_buffer());
        assert_eq!(pool.stats().allocated, 1);
        f.push(b"cd").unwrap();
        g.finish(Ok(()));
        assert_eq!(g.whole().await.unwrap(), "abcd");
        // One that ends before any byte never takes one.
        let (g, _f) = Growing::<String>::lazy(&pool, 4);
        g.finish(Err("gone".into()));
        assert!(g.whole().await.is_err());
        assert_eq!(pool.stats().allocated, 1);
    }

    #[tokio::test]
    async fn a_short_block_is_kept_as_just_its_bytes() {
        let (g, mut f) = block(1 << 20);
        f.push(b"tail").unwrap();
        g.finish(Ok(()));
        let b = g.arrived();
        assert_eq!(b, "tail");
        drop(f);
        // The copy does not hold the big buffer.
        assert_eq!(Arc::strong_count(&g), 1);
    }
}
