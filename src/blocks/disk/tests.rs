use bytes::Bytes;

use super::*;
use crate::blocks::policy::PolicyKind;
use crate::blocks::BlockCache;

fn key(i: u64) -> BlockKey {
    BlockKey::new("bucket", "dir/obj ü", "etag1", 1000, i)
}

#[test]
fn header_round_trip_and_garbage() {
    let h = encode_header(&key(3), b"hello");
    let d = decode_header(&h).unwrap();
    assert_eq!((d.key, d.data_len, d.header_len), (key(3), 5, h.len()));
    assert!(decode_header(b"").is_err());
    assert!(decode_header(&h[..h.len() - 1]).is_err());
    let mut bad = h.clone();
    bad[12] = 0xff;
    assert!(decode_header(&bad).is_err());
}

#[test]
fn survives_reopen_and_stays_in_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let (t, _) = DiskTier::open(dir.path(), 10_000).unwrap();
    for i in 0..30 {
        t.insert(key(i), Bytes::from(vec![i as u8; 1000]));
        assert!(t.stats().used_bytes <= 10_000);
    }
    let kept = t.stats().blocks;
    assert!(kept >= 5 && t.stats().evictions > 0);
    drop(t);
    // A leftover temporary file is cleaned at start.
    std::fs::write(dir.path().join("blocks/00/junk.1.tmp"), b"x").unwrap_or_else(|_| {
        std::fs::create_dir_all(dir.path().join("blocks/00")).unwrap();
        std::fs::write(dir.path().join("blocks/00/junk.1.tmp"), b"x").unwrap();
    });
    let (t, stats) = DiskTier::open(dir.path(), 10_000).unwrap();
    assert_eq!(stats.blocks, kept);
    assert_eq!(stats.removed, 1);
    assert_eq!(t.get(&key(29)).unwrap(), Bytes::from(vec![29u8; 1000]));
}

#[test]
fn a_block_held_is_not_written_again_and_counts_as_used() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let size = (encode_header(&key(0), &[0; 1000]).len() + 1000) as u64;
    // Room for two blocks and a half, in least recently used order (which
    // S3-FIFO's queues cannot show in so few).
    let t = DiskTier::open_unindexed(dir.path(), size * 5 / 2)
        .unwrap()
        .evicting(Evicting::by(PolicyKind::Lru));
    t.index().unwrap();
    t.insert(key(1), Bytes::from(vec![1u8; 1000]));
    t.insert(key(2), Bytes::from(vec![2u8; 1000]));
    let inode = std::fs::metadata(t.path_of(&key(1))).unwrap().ino();
    t.insert(key(1), Bytes::from(vec![1u8; 1000]));
    assert_eq!(std::fs::metadata(t.path_of(&key(1))).unwrap().ino(), inode);
    assert_eq!((t.stats().blocks, t.stats().used_bytes), (2, 2 * size));
    // It was used, so the third block evicts the second.
    t.insert(key(3), Bytes::from(vec![3u8; 1000]));
    assert!(t.get(&key(2)).is_none());
    assert_eq!(t.get(&key(1)).unwrap(), Bytes::from(vec![1u8; 1000]));
}

#[test]
fn a_corrupt_block_is_dropped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (t, _) = DiskTier::open(dir.path(), 1 << 20).unwrap();
    t.insert(key(1), Bytes::from(vec![7u8; 4096]));
    let path = t.path_of(&key(1));
    let mut raw = std::fs::read(&path).unwrap();
    let n = raw.len();
    raw[n - 10] ^= 0xff;
    std::fs::write(&path, raw).unwrap();
    assert!(t.get(&key(1)).is_none());
    assert_eq!(t.failures().checksum, 1);
    assert!(!path.exists());
    assert_eq!(t.stats().blocks, 0);
}

fn block(i: u64) -> Bytes {
    Bytes::from(vec![i as u8; 1000])
}

/// A tier holding blocks `ids`, closed again; the size of each block file.
fn written(dir: &std::path::Path, ids: &[u64]) -> u64 {
    let (t, _) = DiskTier::open(dir, 1 << 20).unwrap();
    for &i in ids {
        t.insert(key(i), block(i));
        // Apart in time: the scan orders what it finds by age.
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    (encode_header(&key(0), &block(0)).len() + 1000) as u64
}

#[test]
fn a_block_the_scan_has_not_read_is_found_by_name_and_counted_once() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let size = written(dir.path(), &[1, 2, 3]);
    let t = DiskTier::open_unindexed(dir.path(), 1 << 20).unwrap();
    assert_eq!(t.stats().blocks, 0);
    assert_eq!(t.get(&key(2)).unwrap(), block(2));
    assert_eq!((t.stats().blocks, t.stats().used_bytes), (1, size));
    // A block about to be written that is on disk already is kept, not
    // written again.
    let inode = std::fs::metadata(t.path_of(&key(3))).unwrap().ino();
    t.insert(key(3), block(3));
    assert_eq!(std::fs::metadata(t.path_of(&key(3))).unwrap().ino(), inode);
    assert_eq!(t.stats().blocks, 2);
    assert!(t.get(&key(9)).is_none());
    assert_eq!(
        t.progress(),
        IndexProgress {
            read: 0,
            done: false
        }
    );
    let stats = t.index().unwrap();
    assert_eq!((stats.blocks, stats.bytes), (3, 3 * size));
    assert_eq!((t.stats().blocks, t.stats().used_bytes), (3, 3 * size));
    assert_eq!(
        t.progress(),
        IndexProgress {
            read: 3,
            done: true
        }
    );
    // Done: a block the index does not know is not on disk.
    std::fs::remove_file(t.path_of(&key(1))).unwrap();
    assert_eq!(t.get(&key(1)), None);
    assert!(t.get(&key(9)).is_none());
}

#[test]
fn nothing_is_evicted_until_the_scan_is_done_and_writes_fit_whatever_is_unread() {
    let dir = tempfile::tempdir().unwrap();
    let size = written(dir.path(), &[1, 2]);
    let cap = size * 5 / 2;
    let t = DiskTier::open_unindexed(dir.path(), cap).unwrap();
    // What the files not read yet may hold leaves no room.
    t.state.lock().unwrap().unscanned = 2 * size;
    t.insert(key(3), block(3));
    assert!(!t.path_of(&key(3)).exists());
    // Room for it whatever they hold: written, nothing evicted.
    t.state.lock().unwrap().unscanned = size;
    t.insert(key(3), block(3));
    assert!(t.path_of(&key(3)).exists());
    assert_eq!(t.stats().evictions, 0);
    assert!(t.path_of(&key(1)).exists() && t.path_of(&key(2)).exists());
    // Found by name meanwhile: most recently used, as written ones are.
    assert_eq!(t.get(&key(2)).unwrap(), block(2));
    let stats = t.index().unwrap();
    // Three blocks over the bound: the oldest found by the scan goes.
    assert_eq!((stats.blocks, stats.bytes), (2, 2 * size));
    assert_eq!(t.stats().evictions, 1);
    assert!(!t.path_of(&key(1)).exists());
    assert_eq!(t.get(&key(3)).unwrap(), block(3));
    assert_eq!(t.get(&key(2)).unwrap(), block(2));
}

#[test]
fn a_bad_file_found_by_name_is_treated_as_the_scan_treats_it() {
    let dir = tempfile::tempdir().unwrap();
    written(dir.path(), &[1, 2, 3]);
    let t = DiskTier::open_unindexed(dir.path(), 1 << 20).unwrap();
    // Data that is not its checksum's: dropped and counted, as a read does.
    let path = t.path_of(&key(1));
    let mut raw = std::fs::read(&path).unwrap();
    let n = raw.len();
    raw[n - 1] ^= 0xff;
    std::fs::write(&path, raw).unwrap();
    assert!(t.get(&key(1)).is_none());
    assert_eq!(t.failures().checksum, 1);
    assert!(!path.exists());
    // Another format version: removed, as the scan removes it.
    let path = t.path_of(&key(2));
    let mut raw = std::fs::read(&path).unwrap();
    raw[8..12].copy_from_slice(&99u32.to_le_bytes());
    std::fs::write(&path, raw).unwrap();
    assert!(t.get(&key(2)).is_none());
    assert!(!path.exists());
    let stats = t.index().unwrap();
    assert_eq!((stats.blocks, stats.removed), (1, 1));
    assert_eq!(t.get(&key(3)).unwrap(), block(3));
}

#[test]
fn a_purge_while_the_scan_runs_reaches_the_files_it_has_not_read() {
    let dir = tempfile::tempdir().unwrap();
    written(dir.path(), &[1, 2, 3, 4]);
    let t = DiskTier::open_unindexed(dir.path(), 1 << 20).unwrap();
    assert_eq!(t.get(&key(4)).unwrap(), block(4));
    // Block 4 is indexed: dropped at once; block 2 is not read yet.
    assert_eq!(
        t.remove_shared(std::sync::Arc::new(|k| k.index % 2 == 0)),
        1
    );
    assert!(t.get(&key(2)).is_none());
    let stats = t.index().unwrap();
    assert_eq!(stats.blocks, 2);
    assert!(!t.path_of(&key(2)).exists() && !t.path_of(&key(4)).exists());
    assert_eq!(t.get(&key(1)).unwrap(), block(1));
}

#[test]
fn the_scan_leaves_the_files_being_written_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    written(dir.path(), &[1]);
    let old = t_path(dir.path(), "00/old.1.tmp");
    std::fs::write(&old, b"x").unwrap();
    let t = DiskTier::open_unindexed(dir.path(), 1 << 20).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let new = t_path(dir.path(), "00/new.2.tmp");
    std::fs::write(&new, b"x").unwrap();
    let stats = t.index().unwrap();
    assert_eq!((stats.blocks, stats.removed), (1, 1));
    assert!(!old.exists() && new.exists());
}

fn t_path(dir: &std::path::Path, rel: &str) -> std::path::PathBuf {
    let p = dir.join("blocks").join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    p
}

/// A tier of `blocks` blocks evicting by `policy`: its hot set of 20 read
/// three times, then a scan of `scan` others read once; the hot blocks kept.
fn hot_set_after_a_scan(policy: PolicyKind, blocks: u64, scan: u64) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let size = (encode_header(&key(0), &[0; 1000]).len() + 1000) as u64;
    let t = DiskTier::open_unindexed(dir.path(), blocks * size)
        .unwrap()
        .evicting(Evicting::by(policy));
    t.index().unwrap();
    let read = |i| {
        if t.get(&key(i)).is_none() {
            t.insert(key(i), block(i));
        }
    };
    for _ in 0..3 {
        (0..20).for_each(read);
    }
    (1000..1000 + scan).for_each(read);
    (0..20).filter(|&i| t.path_of(&key(i)).exists()).count()
}

#[test]
fn a_scan_of_five_times_the_tier_leaves_its_hot_blocks_on_disk() {
    assert_eq!(hot_set_after_a_scan(PolicyKind::S3Fifo, 100, 500), 20);
    assert_eq!(hot_set_after_a_scan(PolicyKind::Lru, 100, 500), 0);
}

#[test]
fn a_restarted_tier_keeps_what_it_held_through_a_scan_after() {
    let dir = tempfile::tempdir().unwrap();
    let size = written(dir.path(), &(0..50).collect::<Vec<_>>());
    let (t, stats) = DiskTier::open(dir.path(), 50 * size).unwrap();
    assert_eq!(stats.blocks, 50);
    for i in 1000..1150 {
        t.insert(key(i), block(i));
    }
    // Nine tenths kept, the newest of them; the scan's blocks came and went
    // through the rest.
    let kept: Vec<u64> = (0..50).filter(|&i| t.path_of(&key(i)).exists()).collect();
    assert_eq!(kept, (5..50).collect::<Vec<_>>());
    assert_eq!(t.stats().blocks, 50);
}
