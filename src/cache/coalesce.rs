//! Single flight: concurrent requests for one key share one fetch.
//!
//! The fetch runs in its own task, so a requester that goes away (a client that
//! disconnects) does not cancel it for the others. The first caller becomes the
//! leader; the rest follow. If the fetch fails or its task dies, every waiter gets
//! an error (never a hang); callers decide whether to try again.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use futures_util::future::{BoxFuture, FutureExt, Shared};

use crate::s3::S3Error;

type Flight<V> = Shared<BoxFuture<'static, Result<V, S3Error>>>;

/// Whether this caller started the fetch or joined one in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Joined {
    Leader,
    Follower,
}

pub struct Coalescer<K, V: Clone> {
    inflight: Arc<Mutex<HashMap<K, Flight<V>>>>,
}

impl<K, V: Clone> Default for Coalescer<K, V> {
    fn default() -> Self {
        Self {
            inflight: Arc::new(Mutex::new(HashMap::new())),
        }
    }
}

impl<K, V> Coalescer<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Runs `fetch` for `key` unless one is already in flight, and waits for it.
    pub async fn run<F>(&self, key: K, fetch: F) -> (Result<V, S3Error>, Joined)
    where
        F: Future<Output = Result<V, S3Error>> + Send + 'static,
    {
        let (flight, joined) = {
            let mut map = self.inflight.lock().unwrap();
            match map.get(&key) {
                Some(f) => (f.clone(), Joined::Follower),
                None => {
                    let map_ref = self.inflight.clone();
                    let k2 = key.clone();
                    let task = tokio::spawn(async move {
                        let r = fetch.await;
                        map_ref.lock().unwrap().remove(&k2);
                        r
                    });
                    let map_ref = self.inflight.clone();
                    let k3 = key.clone();
                    let flight = async move {
                        match task.await {
                            Ok(r) => r,
                            Err(e) => {
                                // The task panicked or was aborted: unblock everyone.
                                map_ref.lock().unwrap().remove(&k3);
                                Err(S3Error::Transport {
                                    endpoint: String::new(),
                                    message: format!("fetch task failed: {e}"),
                                })
                            }
                        }
                    }
                    .boxed()
                    .shared();
                    map.insert(key, flight.clone());
                    (flight, Joined::Leader)
                }
            }
        };
        (flight.await, joined)
    }

    pub fn in_flight(&self) -> usize {
        self.inflight.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn concurrent_callers_share_one_fetch() {
        let c: Arc<Coalescer<u32, u32>> = Arc::new(Coalescer::default());
        let runs = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let (c, runs) = (c.clone(), runs.clone());
            tasks.push(tokio::spawn(async move {
                c.run(7, async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Ok(42)
                })
                .await
            }));
        }
        let mut leaders = 0;
        for t in tasks {
            let (r, j) = t.await.unwrap();
            assert_eq!(r.unwrap(), 42);
            leaders += (j == Joined::Leader) as usize;
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(leaders, 1);
        assert_eq!(c.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_dying_fetch_releases_its_waiters() {
        let c: Arc<Coalescer<u32, u32>> = Arc::new(Coalescer::default());
        let (r, _) = c
            .run(1, async {
                panic!("fetch blew up");
                #[allow(unreachable_code)]
                Ok(0)
            })
            .await;
        assert!(r.unwrap_err().to_string().contains("fetch task failed"));
        // The key is free again: the next caller fetches afresh.
        let (r, j) = c.run(1, async { Ok(5) }).await;
        assert_eq!((r.unwrap(), j), (5, Joined::Leader));
    }

    #[tokio::test]
    async fn a_leader_that_goes_away_does_not_cancel_the_fetch() {
        let c: Arc<Coalescer<u32, u32>> = Arc::new(Coalescer::default());
        let c2 = c.clone();
        let leader = tokio::spawn(async move {
            c2.run(3, async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok(9)
            })
            .await
        });
        while c.in_flight() == 0 {
            tokio::task::yield_now().await;
        }
        leader.abort();
        let (r, j) = c.run(3, async { Ok(0) }).await;
        assert_eq!((r.unwrap(), j), (9, Joined::Follower));
    }
}
