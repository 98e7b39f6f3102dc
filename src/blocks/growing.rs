//! A block being fetched, readable while it arrives: the first asker's fetch
//! appends chunks as the origin sends them, and every asker (the first and any
//! that join) streams them from the start, so a cold read's first byte is the
//! origin's first byte plus one hop instead of a whole block's transfer. The tiers
//! get the block only once it is whole; a reader never sees bytes past what has
//! arrived, and the fetch's error ends every reader's stream.

use std::sync::Mutex;

use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use tokio::sync::watch;

/// The chunks so far, and how the fetch ended.
struct State<E> {
    chunks: Vec<Bytes>,
    len: u64,
    end: Option<Result<(), E>>,
}

pub struct Growing<E> {
    state: Mutex<State<E>>,
    /// Bumped on every change; readers wait on it.
    changed: watch::Sender<u64>,
}

impl<E: Clone + Send + Sync + 'static> Default for Growing<E> {
    fn default() -> Self {
        Growing {
            state: Mutex::new(State {
                chunks: Vec::new(),
                len: 0,
                end: None,
            }),
            changed: watch::channel(0).0,
        }
    }
}

impl<E: Clone + Send + Sync + 'static> Growing<E> {
    pub fn push(&self, b: Bytes) {
        if b.is_empty() {
            return;
        }
        let mut s = self.state.lock().unwrap();
        s.len += b.len() as u64;
        s.chunks.push(b);
        drop(s);
        self.changed.send_modify(|v| *v += 1);
    }

    /// Ends the block: readers finish (`Ok`) or fail with `e`.
    pub fn finish(&self, r: Result<(), E>) {
        self.state.lock().unwrap().end.get_or_insert(r);
        self.changed.send_modify(|v| *v += 1);
    }

    /// Bytes arrived so far.
    pub fn len(&self) -> u64 {
        self.state.lock().unwrap().len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The whole block as one buffer (for the tiers, once it is complete).
    pub fn concat(&self) -> Bytes {
        let s = self.state.lock().unwrap();
        if s.chunks.len() == 1 {
            return s.chunks[0].clone();
        }
        let mut out = BytesMut::with_capacity(s.len as usize);
        for c in &s.chunks {
            out.extend_from_slice(c);
        }
        out.freeze()
    }

    /// Whether the fetch has ended, well or not.
    pub fn is_done(&self) -> bool {
        self.state.lock().unwrap().end.is_some()
    }

    /// The whole block once the fetch has ended, or its error.
    pub async fn whole(&self) -> Result<Bytes, E> {
        let mut rx = self.changed.subscribe();
        loop {
            let end = self.state.lock().unwrap().end.clone();
            match end {
                Some(Ok(())) => return Ok(self.concat()),
                Some(Err(e)) => return Err(e),
                None => {}
            }
            if rx.changed().await.is_err() {
                // The sender lives in `self`: it cannot go while we hold it.
                unreachable!("a growing block outlived its own sender");
            }
        }
    }

    /// Waits until the first bytes are here or the fetch ended; the fetch's
    /// error if it failed before sending anything (an answer, not a cut body).
    pub async fn started(&self) -> Result<(), E> {
        let mut rx = self.changed.subscribe();
        loop {
            {
                let s = self.state.lock().unwrap();
                if let Some(Err(e)) = &s.end {
                    if s.len == 0 {
                        return Err(e.clone());
                    }
                }
                if s.len > 0 || s.end.is_some() {
                    return Ok(());
                }
            }
            if rx.changed().await.is_err() {
                return Ok(());
            }
        }
    }

    /// The block from its first byte, chunk by chunk as they arrive.
    pub fn stream(self: std::sync::Arc<Self>) -> impl Stream<Item = Result<Bytes, E>> + Send {
        let rx = self.changed.subscribe();
        futures_util::stream::unfold(
            (self, rx, 0usize, false),
            |(g, mut rx, next, done)| async move {
                if done {
                    return None;
                }
                loop {
                    {
                        let s = g.state.lock().unwrap();
                        if let Some(c) = s.chunks.get(next) {
                            let c = c.clone();
                            drop(s);
                            return Some((Ok(c), (g, rx, next + 1, false)));
                        }
                        match &s.end {
                            Some(Ok(())) => return None,
                            Some(Err(e)) => {
                                let e = e.clone();
                                drop(s);
                                return Some((Err(e), (g, rx, next, true)));
                            }
                            None => {}
                        }
                    }
                    if rx.changed().await.is_err() {
                        return None;
                    }
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use std::sync::Arc;

    #[tokio::test]
    async fn readers_see_chunks_as_they_come_and_then_the_end() {
        let g: Arc<Growing<String>> = Arc::default();
        let early = tokio::spawn(g.clone().stream().collect::<Vec<_>>());
        g.push(Bytes::from_static(b"ab"));
        g.started().await.unwrap();
        let mid = g.clone().stream();
        g.push(Bytes::from_static(b"cd"));
        g.finish(Ok(()));
        let late: Vec<_> = g.clone().stream().collect().await;
        for got in [early.await.unwrap(), mid.collect().await, late] {
            let bytes: Vec<u8> = got.into_iter().flat_map(|c| c.unwrap().to_vec()).collect();
            assert_eq!(bytes, b"abcd");
        }
        assert_eq!(g.concat(), Bytes::from_static(b"abcd"));
    }

    #[tokio::test]
    async fn an_error_before_any_byte_is_an_answer_and_after_one_ends_the_stream() {
        let g: Arc<Growing<String>> = Arc::default();
        g.finish(Err("412".into()));
        assert_eq!(g.started().await, Err("412".into()));

        let g: Arc<Growing<String>> = Arc::default();
        g.push(Bytes::from_static(b"x"));
        g.finish(Err("cut".into()));
        assert!(g.started().await.is_ok());
        let got: Vec<_> = g.clone().stream().collect().await;
        assert_eq!(got.len(), 2);
        assert!(got[1].is_err());
    }
}
