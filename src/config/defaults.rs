//! Defaults, each with its reason.

use std::time::Duration;
/// One routing unit: large enough that per-request overhead is small against
/// S3's first-byte latency, small enough that a 1 GiB file spreads over a cluster.
pub const CLUSTER_BLOCK_SIZE: u64 = 1 << 20;
/// What a node caches and widens to; equal to the cluster block by default so a
/// routed block is exactly one node block.
pub const NODE_BLOCK_SIZE: u64 = 1 << 20;
/// Blocks in flight per read: 8 MiB ahead keeps a 1 GB/s stream busy at ~8 ms RTT.
pub const READ_WINDOW: usize = 8;
pub const LOAD_LIMIT: usize = 256;
pub const DOWN_FOR: Duration = Duration::from_secs(5);
pub const DNS_REFRESH: Duration = Duration::from_secs(10);
/// Hedge when a node takes 3x its usual time to first byte.
pub const HEDGE_FACTOR: f64 = 3.0;
/// Never hedge sooner than this: loopback estimates are tiny and noisy.
pub const HEDGE_FLOOR: Duration = Duration::from_millis(20);
/// At most 10% extra requests from hedging, so a slow cluster is not doubled.
pub const HEDGE_BUDGET: f64 = 0.1;
/// Node deadlines: a node is near, so a node that cannot connect in 500 ms or
/// answer in 2 s is better skipped for the origin.
pub const NODE_CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
pub const NODE_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(2);
pub const NODE_STALL_TIMEOUT: Duration = Duration::from_secs(1);
/// Origin deadlines: S3 first bytes are tens of ms, with a long tail.
pub const ORIGIN_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
pub const ORIGIN_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(15);
pub const ORIGIN_STALL_TIMEOUT: Duration = Duration::from_secs(10);
pub const ORIGIN_MAX_ATTEMPTS: u32 = 4;
pub const RETRY_BASE: Duration = Duration::from_millis(50);
pub const RETRY_MAX: Duration = Duration::from_secs(2);
/// How long a request the origin throttles keeps trying: S3's `SlowDown` at a
/// fleet's cold start passes within seconds, and a read that fails is worse
/// than one that waits.
pub const THROTTLE_DEADLINE: Duration = Duration::from_secs(30);
pub const REVALIDATE_AFTER: Duration = Duration::from_secs(1);
/// The backstop behind invalidation: past it, what a node knows of an object is
/// checked with the origin again however it was learned (a node that missed a
/// purge serves nothing stale for longer).
pub const MAX_AGE: Duration = Duration::from_secs(3600);
/// A gateway forwards a client's miss once; a forwarded request is never forwarded.
pub const HOP_LIMIT: u32 = 1;
/// Consecutive failures that trip a node's breaker, and how long it stays open.
pub const BREAKER_FAILURES: u32 = 3;
pub const BREAKER_COOLDOWN: Duration = Duration::from_secs(30);
/// Block requests a gateway has in flight to other nodes at once.
pub const PEER_CONCURRENCY: usize = 64;
/// Longest a gateway's miss waits for a peer request slot before it sheds to
/// the origin.
pub const PEER_QUEUE_WAIT: Duration = Duration::from_millis(100);
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a node that misses a block it owns waits on the block's runner-up
/// (`Cache-Control: only-if-cached`) before it asks the origin: a node answers
/// from RAM or disk in a few ms, an origin's first byte is tens of ms or more.
pub const PEER_FILL_TIMEOUT: Duration = Duration::from_millis(150);
/// A disk writes a few hundred MiB a second: a RAM tier's hot blocks in this long.
pub const STOP_FLUSH_TIMEOUT: Duration = Duration::from_secs(10);
/// A mount's disk tier when `mount.disk_cache` names a directory but no size.
pub const MOUNT_DISK_CACHE: u64 = 10 << 30;
/// Slow or silent clients: S3 itself closes idle connections after about 20 s.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Well above what a cluster's mounts keep open, well below the open-file limit
/// a node raises itself to.
pub const MAX_CONNECTIONS: usize = 10_000;
pub const METADATA_TTL: Duration = Duration::from_secs(10);
pub const NEGATIVE_TTL: Duration = Duration::from_secs(1);
/// A node's metadata cache: the longest it keeps an answer, and its bound.
pub const METADATA_CACHE_TTL: Duration = Duration::from_secs(60);
pub const METADATA_CACHE_SIZE: u64 = 64 << 20;
/// Files of a directory walked in order fetched ahead: at S3's ~20 ms first
/// byte, 32 files in flight read small files ~30x faster than one at a time.
pub const PREFETCH_FILES: usize = 32;
pub const NODE_RAM: u64 = 1 << 30;
pub const MOUNT_RAM: u64 = 256 << 20;
/// Pinned blocks may hold half of a tier: the rest still caches what is read.
pub const PIN_SHARE: f64 = 0.5;
pub const MAX_SKEW: Duration = Duration::from_secs(15 * 60);
