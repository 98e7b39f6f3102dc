//! Pinned blocks: those of prefixes a rule pins (`pin = true`: a model, a
//! dataset's index) stay out of eviction while they fit the tier's pin budget.
//!
//! Past the budget the pinned block used least recently yields first, as any
//! block would: pins can never hold more of the tier than the budget while
//! others wait for room, and a pin that outgrows it degrades to a cache, not
//! to a refusal. Within the budget, other blocks are given up first; a tier
//! holding nothing but pins gives up pins.

use std::sync::Arc;

use lru::LruCache;

use super::Eviction;
use std::hash::Hash;

/// Whether a block is of a pinned prefix.
pub type PinFn<K> = Arc<dyn Fn(&K) -> bool + Send + Sync>;

pub struct Pinned<K: Hash + Eq, V> {
    inner: Box<dyn Eviction<K, V>>,
    pins: LruCache<K, (V, u64)>,
    pinned_bytes: u64,
    /// The share of the tier pins may hold, in thousandths.
    share: u64,
    budget: u64,
    is_pinned: PinFn<K>,
}

impl<K: Hash + Eq, V> Pinned<K, V> {
    /// Pins what `is_pinned` picks within `share_per_mille` of `capacity`.
    pub fn new(
        inner: Box<dyn Eviction<K, V>>,
        capacity: u64,
        share_per_mille: u64,
        is_pinned: PinFn<K>,
    ) -> Self {
        let share = share_per_mille.min(1000);
        Pinned {
            inner,
            pins: LruCache::unbounded(),
            pinned_bytes: 0,
            share,
            budget: budget(capacity, share),
            is_pinned,
        }
    }
}

fn budget(capacity: u64, share: u64) -> u64 {
    (capacity as u128 * share as u128 / 1000) as u64
}

impl<K: Hash + Eq + Send, V: Send> Eviction<K, V> for Pinned<K, V> {
    fn get(&mut self, key: &K) -> Option<&V> {
        if self.pins.contains(key) {
            return self.pins.get(key).map(|(v, _)| v);
        }
        self.inner.get(key)
    }

    fn peek(&self, key: &K) -> Option<&V> {
        match self.pins.peek(key) {
            Some((v, _)) => Some(v),
            None => self.inner.peek(key),
        }
    }

    fn insert(&mut self, key: K, value: V, weight: u64) -> Option<V> {
        if !(self.is_pinned)(&key) {
            return self.inner.insert(key, value, weight);
        }
        let old = self.pins.put(key, (value, weight));
        self.pinned_bytes += weight;
        old.map(|(v, w)| {
            self.pinned_bytes -= w;
            v
        })
    }

    fn insert_kept(&mut self, key: K, value: V, weight: u64) -> Option<V> {
        if (self.is_pinned)(&key) {
            return self.insert(key, value, weight);
        }
        self.inner.insert_kept(key, value, weight)
    }

    fn restore(&mut self, oldest_first: Vec<(K, V, u64)>) {
        let (pinned, rest): (Vec<_>, Vec<_>) = oldest_first
            .into_iter()
            .partition(|(k, _, _)| (self.is_pinned)(k));
        for (k, v, w) in pinned {
            self.insert(k, v, w);
        }
        self.inner.restore(rest);
    }

    fn remove(&mut self, key: &K) -> Option<V> {
        if let Some((v, w)) = self.pins.pop(key) {
            self.pinned_bytes -= w;
            return Some(v);
        }
        self.inner.remove(key)
    }

    fn pop_victim(&mut self) -> Option<(K, V)> {
        if self.pinned_bytes <= self.budget {
            if let Some(v) = self.inner.pop_victim() {
                return Some(v);
            }
        }
        let (k, (v, w)) = self.pins.pop_lru()?;
        self.pinned_bytes -= w;
        Some((k, v))
    }

    fn len(&self) -> usize {
        self.pins.len() + self.inner.len()
    }

    fn set_capacity(&mut self, bytes: u64) {
        self.budget = budget(bytes, self.share);
        self.inner.set_capacity(bytes);
    }

    fn iter(&self) -> Box<dyn Iterator<Item = (&K, &V)> + '_> {
        Box::new(
            self.pins
                .iter()
                .map(|(k, (v, _))| (k, v))
                .chain(self.inner.iter()),
        )
    }
}
