//! Single flight: concurrent requests for one key share one fetch.
//!
//! The fetch runs in its own task, so a requester that goes away (a client that
//! disconnects) does not cancel it for the others. The first caller becomes the
//! leader; the rest follow. If the fetch fails every waiter gets its error; if its
//! task dies they get [`FlightError::Lost`] (never a hang). Callers decide whether to
//! try again.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use futures_util::future::{BoxFuture, FutureExt, Shared};

/// Why a flight brought nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlightError<E> {
    /// The fetch itself failed.
    #[error("{0}")]
    Failed(E),
    /// The fetch's task panicked or was aborted.
    #[error("fetch task failed: {0}")]
    Lost(String),
}

type Flight<V, E> = Shared<BoxFuture<'static, Result<V, FlightError<E>>>>;

/// Whether this caller started the fetch or joined one in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Joined {
    Leader,
    Follower,
}

pub struct Flights<K, V: Clone, E: Clone> {
    inflight: Arc<Mutex<HashMap<K, Flight<V, E>>>>,
}

impl<K, V: Clone, E: Clone> Default for Flights<K, V, E> {
    fn default() -> Self {
        Self {
            inflight: Arc::new(Mutex::new(HashMap::new())),
        }
    }
}

impl<K, V, E> Flights<K, V, E>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    /// Runs `fetch` for `key` unless one is already in flight, and waits for it.
    pub async fn run<F>(&self, key: K, fetch: F) -> (Result<V, FlightError<E>>, Joined)
    where
        F: Future<Output = Result<V, E>> + Send + 'static,
    {
        let (flight, joined) = {
            let mut map = self.inflight.lock().unwrap();
            match map.get(&key) {
                Some(f) => (f.clone(), Joined::Follower),
                None => {
                    let map_ref = self.inflight.clone();
                    let k2 = key.clone();
                    let watcher = crate::store::seen::watcher();
                    let task = tokio::spawn(async move {
                        let r = crate::store::seen::watched(watcher, fetch).await;
                        map_ref.lock().unwrap().remove(&k2);
                        r
                    });
                    let map_ref = self.inflight.clone();
                    let k3 = key.clone();
                    let flight = async move {
                        match task.await {
                            Ok(r) => r.map_err(FlightError::Failed),
                            Err(e) => {
                                // The task panicked or was aborted: unblock everyone.
                                map_ref.lock().unwrap().remove(&k3);
                                Err(FlightError::Lost(e.to_string()))
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

    type F = Flights<u32, u32, String>;

    #[tokio::test]
    async fn concurrent_callers_share_one_fetch() {
        let c: Arc<F> = Arc::new(Flights::default());
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
        let c: Arc<F> = Arc::new(Flights::default());
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
        let (r, _) = c.run(2, async { Err("no".to_owned()) }).await;
        assert_eq!(r, Err(FlightError::Failed("no".to_owned())));
    }

    #[tokio::test]
    async fn a_leader_that_goes_away_does_not_cancel_the_fetch() {
        let c: Arc<F> = Arc::new(Flights::default());
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
