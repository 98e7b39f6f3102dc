//! Least recently used: the tiers' policy before S3-FIFO, kept selectable.

use std::hash::Hash;

use lru::LruCache;

use super::Eviction;

pub struct Lru<K: Hash + Eq, V> {
    entries: LruCache<K, V>,
}

impl<K: Hash + Eq, V> Lru<K, V> {
    pub fn new() -> Self {
        Lru {
            entries: LruCache::unbounded(),
        }
    }
}

impl<K: Hash + Eq, V> Default for Lru<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Hash + Eq + Send, V: Send> Eviction<K, V> for Lru<K, V> {
    fn get(&mut self, key: &K) -> Option<&V> {
        self.entries.get(key)
    }

    fn peek(&self, key: &K) -> Option<&V> {
        self.entries.peek(key)
    }

    fn contains(&self, key: &K) -> bool {
        self.entries.contains(key)
    }

    fn insert(&mut self, key: K, value: V, _: u64) -> Option<V> {
        self.entries.put(key, value)
    }

    fn remove(&mut self, key: &K) -> Option<V> {
        self.entries.pop(key)
    }

    fn pop_victim(&mut self) -> Option<(K, V)> {
        self.entries.pop_lru()
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn set_capacity(&mut self, _: u64) {}

    fn iter(&self) -> Box<dyn Iterator<Item = (&K, &V)> + '_> {
        Box::new(self.entries.iter())
    }
}
