//! [`MetadataCache`]: listing pages as the origin answered them (status, headers,
//! body, byte for byte) and keys the origin said are missing, shared by every
//! asker that accepts an answer of their age.
//!
//! Each request says how old an answer it accepts (a mount's `metadata_ttl`, or a
//! rule's `list_ttl` for plain S3 clients); nothing is kept past the node's own
//! `[cache] metadata_ttl`, and all of it fits in `[cache] metadata_size` bytes,
//! the least recently used page going first. Identical requests in flight cost
//! the origin one. An invalidation drops every page whose prefix covers the key
//! (or overlaps the prefix) and the key's missing mark; a fetch that was in
//! flight across an invalidation is served to its askers but not kept.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use shoal::blocks::{FlightError, Flights, Joined};
use shoal::store::StoreError;

/// What an entry costs beyond its bytes: keys, map and list slots.
const ENTRY_OVERHEAD: u64 = 256;

/// An answer as the origin gave it.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    pub body: Bytes,
}

impl Answer {
    fn bytes(&self) -> u64 {
        let h: usize = self
            .headers
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len())
            .sum();
        (self.body.len() + h) as u64
    }
}

/// An answer's age in whole seconds for an `Age` header, rounded up: a cache
/// that keeps a copy this old never holds it past its TTL.
pub fn age_secs_up(age: Duration) -> u64 {
    age.as_secs() + u64::from(age.subsec_nanos() > 0)
}

/// How a listing was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listed {
    /// From the cache, this old.
    Hit(Duration),
    /// This request asked the origin.
    Fetched,
    /// This request took it from the node that held it before (its runner-up),
    /// where it was this old.
    Taken(Duration),
    /// It joined a request to the origin already in flight.
    Joined,
}

enum Held {
    Listing(Arc<Answer>),
    Missing,
}

struct Entry {
    bucket: String,
    /// A listing's prefix, or the missing key.
    scope: String,
    held: Held,
    at: Instant,
    bytes: u64,
    tick: u64,
}

#[derive(Default)]
struct Inner {
    map: HashMap<String, Entry>,
    /// Entries by last use, oldest first.
    lru: BTreeMap<u64, String>,
    used: u64,
    tick: u64,
    evictions: u64,
}

impl Inner {
    fn touch(&mut self, id: &str) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(e) = self.map.get_mut(id) {
            self.lru.remove(&e.tick);
            e.tick = tick;
            self.lru.insert(tick, id.to_owned());
        }
    }

    fn remove(&mut self, id: &str) {
        if let Some(e) = self.map.remove(id) {
            self.lru.remove(&e.tick);
            self.used -= e.bytes;
        }
    }

    fn insert(&mut self, id: String, mut e: Entry, capacity: u64) {
        self.remove(&id);
        if e.bytes > capacity {
            return;
        }
        while self.used + e.bytes > capacity {
            let Some((_, oldest)) = self.lru.pop_first() else {
                break;
            };
            if let Some(old) = self.map.remove(&oldest) {
                self.used -= old.bytes;
                self.evictions += 1;
            }
        }
        self.tick += 1;
        e.tick = self.tick;
        self.used += e.bytes;
        self.lru.insert(e.tick, id.clone());
        self.map.insert(id, e);
    }

    fn retain(&mut self, keep: impl Fn(&Entry) -> bool) {
        let gone: Vec<String> = self
            .map
            .iter()
            .filter(|(_, e)| !keep(e))
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            self.remove(&id);
        }
    }
}

/// What the cache holds, for the gauges.
#[derive(Clone, Copy, Debug, Default)]
pub struct MetadataStats {
    pub entries: u64,
    pub used_bytes: u64,
    pub capacity_bytes: u64,
    pub evictions: u64,
}

pub struct MetadataCache {
    /// The longest anything is kept.
    ttl: Duration,
    capacity: u64,
    inner: Arc<Mutex<Inner>>,
    /// A listing in flight, and how old it was where it came from (`None`:
    /// the origin's answer now).
    flights: Flights<String, (Arc<Answer>, Option<Duration>), StoreError>,
    /// Bumped by every invalidation: a fetch that saw it change keeps nothing.
    generation: Arc<AtomicU64>,
}

impl MetadataCache {
    pub fn new(ttl: Duration, capacity: u64) -> MetadataCache {
        MetadataCache {
            ttl,
            capacity,
            inner: Default::default(),
            flights: Flights::default(),
            generation: Default::default(),
        }
    }

    /// How old an answer may be for a request that accepts `asked`: within the
    /// node's own bound; `None` when nothing may be cached for it.
    pub fn accept(&self, asked: Option<Duration>) -> Option<Duration> {
        let a = asked?.min(self.ttl);
        (!a.is_zero() && self.capacity > 0).then_some(a)
    }

    /// The listing `id`, if one no older than `accept` is held.
    pub fn fresh_listing(&self, id: &str, accept: Duration) -> Option<(Arc<Answer>, Duration)> {
        let mut inner = self.inner.lock().unwrap();
        let e = inner.map.get(id)?;
        let age = e.at.elapsed();
        let Held::Listing(a) = &e.held else {
            return None;
        };
        if age >= accept {
            return None;
        }
        let a = a.clone();
        inner.touch(id);
        Some((a, age))
    }

    /// The listing `id` (of `prefix` in `bucket`): held, joined, or fetched by
    /// `fetch` (kept if the origin answered 200 and nothing was invalidated
    /// meanwhile).
    pub async fn listing<F>(
        &self,
        id: String,
        scope: (&str, &str),
        accept: Duration,
        fetch: F,
    ) -> Result<(Arc<Answer>, Listed), StoreError>
    where
        F: Future<Output = Result<Answer, StoreError>> + Send + 'static,
    {
        let fetch = async move { fetch.await.map(|a| (a, None)) };
        self.listing_aged(id, scope, accept, fetch).await
    }

    /// [`Self::listing`] whose `fetch` may bring a copy another cache held
    /// (`Some(age)`): it is kept that old, so its TTL still runs from when the
    /// origin answered.
    pub async fn listing_aged<F>(
        &self,
        id: String,
        (bucket, prefix): (&str, &str),
        accept: Duration,
        fetch: F,
    ) -> Result<(Arc<Answer>, Listed), StoreError>
    where
        F: Future<Output = Result<(Answer, Option<Duration>), StoreError>> + Send + 'static,
    {
        if let Some((a, age)) = self.fresh_listing(&id, accept) {
            return Ok((a, Listed::Hit(age)));
        }
        let inner = self.inner.clone();
        let generation = self.generation.clone();
        let seen = generation.load(Relaxed);
        let capacity = self.capacity;
        let entry_id = id.clone();
        let (bucket, prefix) = (bucket.to_owned(), prefix.to_owned());
        let flight = async move {
            let (answer, age) = fetch.await?;
            let answer = Arc::new(answer);
            let now = Instant::now();
            let at = age.and_then(|a| now.checked_sub(a)).unwrap_or(now);
            let mut inner = inner.lock().unwrap();
            if answer.status == 200 && generation.load(Relaxed) == seen {
                let bytes =
                    answer.bytes() + (entry_id.len() + prefix.len()) as u64 + ENTRY_OVERHEAD;
                let e = Entry {
                    bucket,
                    scope: prefix,
                    held: Held::Listing(answer.clone()),
                    at,
                    bytes,
                    tick: 0,
                };
                inner.insert(entry_id, e, capacity);
            }
            Ok((answer, age))
        };
        match self.flights.run(id, flight).await {
            (Ok((a, None)), Joined::Leader) => Ok((a, Listed::Fetched)),
            (Ok((a, Some(age))), Joined::Leader) => Ok((a, Listed::Taken(age))),
            (Ok((a, _)), Joined::Follower) => Ok((a, Listed::Joined)),
            (Err(FlightError::Failed(e)), _) => Err(e),
            (Err(FlightError::Lost(why)), _) => Err(StoreError::Protocol {
                endpoint: "origin".into(),
                message: format!("listing fetch lost: {why}"),
            }),
        }
    }

    fn missing_id(bucket: &str, key: &str) -> String {
        format!("missing\0{bucket}\0{key}")
    }

    /// Whether the origin said `bucket/key` is missing no longer than `accept` ago.
    pub fn missing(&self, bucket: &str, key: &str, accept: Duration) -> bool {
        let id = Self::missing_id(bucket, key);
        let inner = self.inner.lock().unwrap();
        inner
            .map
            .get(&id)
            .is_some_and(|e| matches!(e.held, Held::Missing) && e.at.elapsed() < accept)
    }

    /// Notes that the origin just said `bucket/key` is missing.
    pub fn note_missing(&self, bucket: &str, key: &str) {
        if self.capacity == 0 {
            return;
        }
        let id = Self::missing_id(bucket, key);
        let bytes = (id.len() + bucket.len() + key.len()) as u64 + ENTRY_OVERHEAD;
        let e = Entry {
            bucket: bucket.to_owned(),
            scope: key.to_owned(),
            held: Held::Missing,
            at: Instant::now(),
            bytes,
            tick: 0,
        };
        self.inner.lock().unwrap().insert(id, e, self.capacity);
    }

    /// Drops the missing mark of `bucket/key`: it was just found (an ask that
    /// took no mark as old as this one's reached the origin).
    pub fn note_found(&self, bucket: &str, key: &str) {
        let id = Self::missing_id(bucket, key);
        self.inner.lock().unwrap().remove(&id);
    }

    /// Drops what `bucket/key` changing makes wrong: the listings that show it,
    /// and its missing mark.
    pub fn forget_key(&self, bucket: &str, key: &str) {
        self.generation.fetch_add(1, Relaxed);
        self.inner.lock().unwrap().retain(|e| {
            e.bucket != bucket
                || match e.held {
                    Held::Listing(_) => !key.starts_with(&e.scope),
                    Held::Missing => e.scope != key,
                }
        });
    }

    /// Drops what anything under `prefix` changing makes wrong.
    pub fn forget_prefix(&self, bucket: &str, prefix: &str) {
        self.generation.fetch_add(1, Relaxed);
        self.inner.lock().unwrap().retain(|e| {
            e.bucket != bucket
                || match e.held {
                    Held::Listing(_) => {
                        !(e.scope.starts_with(prefix) || prefix.starts_with(&e.scope))
                    }
                    Held::Missing => !e.scope.starts_with(prefix),
                }
        });
    }

    pub fn stats(&self) -> MetadataStats {
        let inner = self.inner.lock().unwrap();
        MetadataStats {
            entries: inner.map.len() as u64,
            used_bytes: inner.used,
            capacity_bytes: self.capacity,
            evictions: inner.evictions,
        }
    }
}

#[cfg(test)]
#[path = "metadata_cache_tests.rs"]
mod tests;
