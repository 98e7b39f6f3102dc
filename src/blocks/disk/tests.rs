use bytes::Bytes;
use std::sync::atomic::Ordering::Relaxed;

use super::*;

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
    let (t, _) = DiskTier::open(dir.path(), 1 << 20).unwrap();
    let size = (encode_header(&key(0), &[0; 1000]).len() + 1000) as u64;
    // Room for two blocks and a half.
    t.capacity.store(size * 5 / 2, Relaxed);
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
