//! S3-FIFO (Yang et al., SOSP 2023), weighted in bytes.
//!
//! New blocks enter a small FIFO of a tenth of the tier. A block at the head of
//! the small queue that was used while in it moves to the main FIFO; one that
//! was not leaves the tier, and its key is remembered in a ghost list. A block
//! fetched again while its key is a ghost goes straight to the main queue: it
//! was evicted too early. The main queue gives each block at its head one more
//! round per use (up to three, uses in the small queue included) before it
//! goes.
//!
//! Most blocks of a scan are read once: they enter and leave through the small
//! queue while the main one, where blocks read many times live, is untouched.
//! A use is a counter bump, not a move in a list, so a hit costs less than an
//! LRU's.
//!
//! Queues hold keys with a sequence number; a block removed or moved leaves
//! its old slot behind, skipped when reached (and swept when slots outnumber
//! blocks).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// A fast hash for keys that never cross a process (no routing depends on it).
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

use super::Eviction;

/// The small queue's share of the tier, in tenths (the paper's 10%).
const SMALL_TENTHS: u64 = 1;
/// Uses counted at most: a block can win three extra rounds in the main queue.
const MAX_FREQ: u8 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Queue {
    Small,
    Main,
}

struct Entry<V> {
    value: V,
    weight: u64,
    freq: u8,
    queue: Queue,
    /// Which slot of its queue is this entry's live one.
    seq: u64,
}

pub struct S3Fifo<K, V> {
    entries: Map<K, Entry<V>>,
    small: VecDeque<(K, u64)>,
    main: VecDeque<(K, u64)>,
    small_bytes: u64,
    main_bytes: u64,
    /// The largest block seen: the small queue holds two at least.
    largest: u64,
    /// Keys dropped from the small queue lately, at most the main queue's
    /// bytes' worth, with the slot that is live.
    ghost: VecDeque<(K, u64, u64)>,
    ghosts: Map<K, u64>,
    ghost_bytes: u64,
    capacity: u64,
    /// The small queue's least share, in bytes: a reader's blocks in flight.
    floor: u64,
    next_seq: u64,
}

impl<K: Hash + Eq + Clone, V> S3Fifo<K, V> {
    pub fn new(capacity: u64) -> Self {
        Self::with_floor(capacity, 0)
    }

    /// A policy whose small queue holds at least `floor` bytes (up to half
    /// the tier): blocks fetched ahead of a reader wait there for it, and a
    /// window of them larger than a tenth of the tier would otherwise push
    /// its own first blocks out before they are read.
    pub fn with_floor(capacity: u64, floor: u64) -> Self {
        S3Fifo {
            floor,
            entries: Map::default(),
            small: VecDeque::new(),
            main: VecDeque::new(),
            small_bytes: 0,
            main_bytes: 0,
            largest: 0,
            ghost: VecDeque::new(),
            ghosts: Map::default(),
            ghost_bytes: 0,
            capacity,
            next_seq: 0,
        }
    }

    /// A tenth of the tier, but room for two blocks in a tier of few: a
    /// block alone in a small queue at its share would be given up the
    /// moment it arrives (a read-ahead before its reader comes).
    fn small_target(&self) -> u64 {
        (self.capacity / 10 * SMALL_TENTHS)
            .max(2 * self.largest)
            .max(self.floor)
            .min(self.capacity / 2)
    }

    fn main_target(&self) -> u64 {
        self.capacity - self.small_target()
    }

    fn seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// Puts `key` (already in `entries`) at the tail of `queue`.
    fn enqueue(&mut self, key: K, queue: Queue) {
        let seq = self.seq();
        let e = self.entries.get_mut(&key).expect("enqueued keys are held");
        e.queue = queue;
        e.seq = seq;
        match queue {
            Queue::Small => {
                self.small_bytes += e.weight;
                self.small.push_back((key, seq));
            }
            Queue::Main => {
                self.main_bytes += e.weight;
                self.main.push_back((key, seq));
            }
        }
        self.sweep();
    }

    fn add(&mut self, key: K, value: V, weight: u64, queue: Queue) -> Option<V> {
        if let Some(e) = self.entries.get_mut(&key) {
            let bytes = match e.queue {
                Queue::Small => &mut self.small_bytes,
                Queue::Main => &mut self.main_bytes,
            };
            *bytes = *bytes - e.weight + weight;
            e.weight = weight;
            return Some(std::mem::replace(&mut e.value, value));
        }
        let queue = if self.ghosts.remove(&key).is_some() {
            Queue::Main
        } else {
            queue
        };
        self.entries.insert(
            key.clone(),
            Entry {
                value,
                weight,
                freq: 0,
                queue,
                seq: 0,
            },
        );
        self.largest = self.largest.max(weight);
        self.enqueue(key, queue);
        None
    }

    fn remember(&mut self, key: K, weight: u64) {
        let seq = self.seq();
        self.ghosts.insert(key.clone(), seq);
        self.ghost.push_back((key, weight, seq));
        self.ghost_bytes += weight;
        while self.ghost_bytes > self.main_target() {
            let Some((k, w, s)) = self.ghost.pop_front() else {
                break;
            };
            self.ghost_bytes -= w;
            if self.ghosts.get(&k) == Some(&s) {
                self.ghosts.remove(&k);
            }
        }
    }

    /// The live entry a queue's head slot names, if it still does.
    fn live(&self, key: &K, seq: u64) -> bool {
        self.entries.get(key).is_some_and(|e| e.seq == seq)
    }

    /// Slots left behind by removals are dropped once they outnumber the
    /// blocks, so a tier that never fills (and so never pops) stays small.
    fn sweep(&mut self) {
        let slots = self.small.len() + self.main.len() + self.ghost.len();
        if slots <= 2 * (self.entries.len() + self.ghosts.len()) + 64 {
            return;
        }
        let entries = &self.entries;
        self.small
            .retain(|(k, s)| entries.get(k).is_some_and(|e| e.seq == *s));
        self.main
            .retain(|(k, s)| entries.get(k).is_some_and(|e| e.seq == *s));
        let ghosts = &self.ghosts;
        let mut dropped = 0;
        self.ghost.retain(|(k, w, s)| {
            let keep = ghosts.get(k) == Some(s);
            if !keep {
                dropped += w;
            }
            keep
        });
        self.ghost_bytes -= dropped;
    }

    /// One step of eviction from the head of `queue`: the block that left,
    /// or None if the head moved on (or was a stale slot). A block used while
    /// in the small queue moves to the main one, its uses kept; one at the
    /// main queue's head spends a use for another round.
    fn step(&mut self, queue: Queue) -> Option<(K, V)> {
        let (key, seq) = match queue {
            Queue::Small => self.small.pop_front(),
            Queue::Main => self.main.pop_front(),
        }?;
        if !self.live(&key, seq) {
            return None;
        }
        let e = self.entries.get_mut(&key).expect("live");
        match queue {
            Queue::Small => self.small_bytes -= e.weight,
            Queue::Main => self.main_bytes -= e.weight,
        }
        if e.freq > 0 {
            if queue == Queue::Main {
                e.freq -= 1;
            }
            self.enqueue(key, Queue::Main);
            return None;
        }
        let e = self.entries.remove(&key).expect("live");
        if queue == Queue::Small {
            self.remember(key.clone(), e.weight);
        }
        Some((key, e.value))
    }
}

impl<K: Hash + Eq + Clone + Send, V: Send> Eviction<K, V> for S3Fifo<K, V> {
    fn get(&mut self, key: &K) -> Option<&V> {
        let e = self.entries.get_mut(key)?;
        e.freq = (e.freq + 1).min(MAX_FREQ);
        Some(&e.value)
    }

    fn peek(&self, key: &K) -> Option<&V> {
        self.entries.get(key).map(|e| &e.value)
    }

    fn contains(&self, key: &K) -> bool {
        self.entries.contains_key(key)
    }

    fn insert(&mut self, key: K, value: V, weight: u64) -> Option<V> {
        self.add(key, value, weight, Queue::Small)
    }

    /// Straight to the main queue while it has room: a restart must not make
    /// the tier give up what it held for the first blocks read after.
    fn insert_kept(&mut self, key: K, value: V, weight: u64) -> Option<V> {
        let queue = if self.main_bytes + weight <= self.main_target() {
            Queue::Main
        } else {
            Queue::Small
        };
        self.add(key, value, weight, queue)
    }

    /// The newest that fit go to the main queue, the older ones before them
    /// to the small one, where they are the first to go.
    fn restore(&mut self, oldest_first: Vec<(K, V, u64)>) {
        let largest = oldest_first.iter().map(|b| b.2).max().unwrap_or(0);
        self.largest = self.largest.max(largest);
        let mut room = self.main_target().saturating_sub(self.main_bytes);
        let mut cut = oldest_first.len();
        while cut > 0 && oldest_first[cut - 1].2 <= room {
            room -= oldest_first[cut - 1].2;
            cut -= 1;
        }
        for (i, (k, v, w)) in oldest_first.into_iter().enumerate() {
            let queue = if i < cut { Queue::Small } else { Queue::Main };
            self.add(k, v, w, queue);
        }
    }

    fn remove(&mut self, key: &K) -> Option<V> {
        let e = self.entries.remove(key)?;
        match e.queue {
            Queue::Small => {
                self.small_bytes -= e.weight;
            }
            Queue::Main => self.main_bytes -= e.weight,
        }
        Some(e.value)
    }

    fn pop_victim(&mut self) -> Option<(K, V)> {
        // By slots, not bytes: blocks of no bytes (an empty object's) are
        // given up too, and every step takes a slot off a queue.
        while !(self.small.is_empty() && self.main.is_empty()) {
            // The small queue gives way once it holds its share (or nothing
            // else is left); until then the main queue does, so new blocks
            // get their tenth of the tier to prove themselves in.
            let from_small = !self.small.is_empty()
                && (self.small_bytes >= self.small_target() || self.main.is_empty());
            let queue = if from_small {
                Queue::Small
            } else {
                Queue::Main
            };
            if let Some(out) = self.step(queue) {
                return Some(out);
            }
        }
        None
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn set_capacity(&mut self, bytes: u64) {
        self.capacity = bytes;
    }

    fn iter(&self) -> Box<dyn Iterator<Item = (&K, &V)> + '_> {
        let entries = &self.entries;
        let live = move |slot: &(K, u64)| {
            let (k, e) = entries.get_key_value(&slot.0)?;
            (e.seq == slot.1).then_some((k, &e.value))
        };
        Box::new(
            self.main
                .iter()
                .rev()
                .filter_map(live)
                .chain(self.small.iter().rev().filter_map(live)),
        )
    }
}

#[cfg(test)]
impl<K, V> S3Fifo<K, V> {
    /// Queue slots, live or left behind.
    pub(super) fn slots(&self) -> usize {
        self.small.len() + self.main.len()
    }
}
