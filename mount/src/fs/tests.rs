//! The filesystem without a kernel or a network: the cluster reader over an
//! in-memory origin behind a fault switchboard.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use shoal::cluster::{ClusterReader, ReaderOptions, ReaderParts};
use shoal::config::ClusterConfig;
use shoal::route::{Membership, TokioClock};
use shoal::store::faults::{Fault, FaultStore};
use shoal::store::memory::MemoryStore;
use shoal::store::ObjectStore;

use super::*;

/// The origin double, and what it was asked since the last [`Origin::reset`].
struct Origin {
    store: Arc<FaultStore<MemoryStore>>,
    mark: std::sync::Mutex<(u64, u64, u64)>,
}

impl Origin {
    fn put(&self, bucket: &str, key: &str, data: impl Into<Bytes>) {
        self.store.inner().put(bucket, key, data);
    }
    /// S3-like latency before every answer.
    fn delay(&self, ms: u64) {
        self.store
            .always(Some(Fault::Delay(Duration::from_millis(ms))));
    }
    fn reset(&self) {
        *self.mark.lock().unwrap() = self.store.inner().counts();
    }
    /// Object GETs since the last reset.
    fn gets(&self) -> u64 {
        self.store.inner().counts().0 - self.mark.lock().unwrap().0
    }
    /// Listings since the last reset.
    fn lists(&self) -> u64 {
        self.store.inner().counts().2 - self.mark.lock().unwrap().2
    }
}

async fn setup(prefix: &str) -> (Origin, Arc<Fs>) {
    let store = Arc::new(FaultStore::new(MemoryStore::new("origin", &["shoal-test"])));
    let cluster = ClusterConfig::standalone();
    let reader = ClusterReader::from_parts(
        ReaderParts {
            origin: store.clone() as Arc<dyn ObjectStore>,
            origin_attempts: 3,
            membership: Membership::from_config(&cluster),
            cluster,
            nodes: Arc::new(HashMap::<String, Arc<dyn ObjectStore>>::new()),
            clock: Arc::new(TokioClock),
        },
        ReaderOptions::default(),
    );
    let fs = Fs::new(
        FsOptions {
            bucket: "shoal-test".into(),
            prefix: prefix.into(),
            metadata_ttl: Duration::from_secs(60),
            negative_ttl: Duration::from_secs(1),
            uid: 0,
            gid: 0,
            file_mode: 0o444,
            dir_mode: 0o555,
            prefetch_files: 32,
            metadata_via_cluster: false,
            splice: true,
        },
        reader,
        None,
        None,
    );
    let origin = Origin {
        store,
        mark: Default::default(),
    };
    (origin, Arc::new(fs))
}

/// Opens a directory as a reader does (a visit in its parent's walk) and reads
/// its entries through the handle, `.` and `..` left out.
async fn opendir(fs: &Arc<Fs>, ino: u64) -> Result<Vec<DirEntry>, FsError> {
    let fh = fs.opendir(ino).await?;
    let entries = fs
        .dir_items(fh, 2)?
        .map(|d| DirEntry {
            name: d.name,
            ino: d.ino,
            kind: d.kind,
        })
        .collect();
    fs.releasedir(fh);
    Ok(entries)
}

/// A read's parts, joined.
async fn read_joined(fs: &Fs, fh: u64, offset: u64, size: u32) -> Result<Bytes, FsError> {
    match fs.read(fh, offset, size, true, None).await? {
        ReadOut::Parts(parts) => Ok(Bytes::from(parts.concat())),
        ReadOut::Piped => unreachable!("no pipe was given"),
    }
}

#[tokio::test]
async fn namespace_from_listings() {
    let (origin, fs) = setup("pre/").await;
    for k in [
        "pre/a.txt",
        "pre/dir/b.txt",
        "pre/dir/sub/c.txt",
        "pre/marker/",
        "pre/both",
        "pre/both/inner",
        "pre/bad//name",
        "pre/dot/./x",
        "outside/not-shown",
    ] {
        origin.put("shoal-test", k, Bytes::from_static(b"data"));
    }
    origin.put(
        "shoal-test",
        &format!("pre/{}", "l".repeat(300)),
        Bytes::from_static(b"x"),
    );
    let root = fs.readdir(ROOT).await.unwrap();
    let names: Vec<(&str, Kind)> = root.iter().map(|e| (e.name.as_str(), e.kind)).collect();
    assert_eq!(
        names,
        vec![
            ("a.txt", Kind::File),
            ("bad", Kind::Dir),
            ("both", Kind::Dir),
            ("dir", Kind::Dir),
            ("dot", Kind::Dir),
            ("marker", Kind::Dir)
        ]
    );
    assert_eq!(fs.stats.skipped_names.load(Relaxed), 1, "the 300-byte name");
    let bad = fs.lookup(ROOT, "bad").await.unwrap();
    assert!(
        fs.readdir(bad.ino).await.unwrap().is_empty(),
        "empty segment skipped"
    );
    assert_eq!(fs.stats.skipped_names.load(Relaxed), 2);
    let dir = fs.lookup(ROOT, "dir").await.unwrap();
    let sub: Vec<String> = fs
        .readdir(dir.ino)
        .await
        .unwrap()
        .iter()
        .map(|e| e.name.clone())
        .collect();
    assert_eq!(sub, vec!["b.txt", "sub"]);
    let a = fs.lookup(ROOT, "a.txt").await.unwrap();
    assert_eq!((a.kind, a.size), (Kind::File, 4));
    // Inode numbers are stable.
    assert_eq!(fs.lookup(ROOT, "a.txt").await.unwrap().ino, a.ino);
    assert!(matches!(
        fs.lookup(ROOT, "nope").await,
        Err(FsError::NotFound)
    ));
    assert!(matches!(
        fs.lookup(ROOT, "..").await,
        Err(FsError::NotFound)
    ));
    assert!(matches!(fs.lookup(a.ino, "x").await, Err(FsError::NotDir)));
}

#[tokio::test]
async fn lookup_without_a_listing_and_negative_cache() {
    let (origin, fs) = setup("").await;
    origin.put("shoal-test", "f", Bytes::from_static(b"12345"));
    origin.put("shoal-test", "d/x", Bytes::from_static(b"1"));
    assert_eq!(fs.lookup(ROOT, "f").await.unwrap().size, 5);
    assert_eq!(fs.lookup(ROOT, "d").await.unwrap().kind, Kind::Dir);
    assert!(matches!(
        fs.lookup(ROOT, "late").await,
        Err(FsError::NotFound)
    ));
    origin.put("shoal-test", "late", Bytes::from_static(b"1"));
    // Still negative within negative_ttl, then found.
    assert!(matches!(
        fs.lookup(ROOT, "late").await,
        Err(FsError::NotFound)
    ));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match fs.lookup(ROOT, "late").await {
            Ok(a) => break assert_eq!(a.size, 1),
            Err(FsError::NotFound) => assert!(
                std::time::Instant::now() < deadline,
                "negative entry never expired"
            ),
            Err(e) => panic!("{e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn reads_and_readahead() {
    let (origin, fs) = setup("").await;
    let body: Vec<u8> = (0..5_000_000u32).map(|i| (i % 251) as u8).collect();
    origin.put("shoal-test", "big", Bytes::from(body.clone()));
    let a = fs.lookup(ROOT, "big").await.unwrap();
    let o = fs.open(a.ino).await.unwrap();
    assert!(!o.keep_cache, "first open has nothing cached");
    let mut off = 0u64;
    while off < body.len() as u64 {
        let got = read_joined(&fs, o.fh, off, 131072).await.unwrap();
        assert_eq!(&got[..], &body[off as usize..(off as usize + got.len())]);
        off += got.len() as u64;
    }
    assert!(
        fs.stats.readahead_blocks.load(Relaxed) > 0,
        "sequential reads fetch ahead"
    );
    assert!(read_joined(&fs, o.fh, body.len() as u64, 10)
        .await
        .unwrap()
        .is_empty());
    fs.release(o.fh);
    // Same version: keep the page cache.
    assert!(fs.open(a.ino).await.unwrap().keep_cache);
    assert!(matches!(
        read_joined(&fs, 9999, 0, 1).await,
        Err(FsError::BadHandle)
    ));
    assert!(matches!(fs.open(ROOT).await, Err(FsError::IsDir)));
}

#[tokio::test]
async fn a_changed_object_fails_its_open_handle_with_estale() {
    let (origin, fs) = setup("").await;
    origin.put("shoal-test", "v", Bytes::from(vec![1u8; 3_000_000]));
    let a = fs.lookup(ROOT, "v").await.unwrap();
    let o = fs.open(a.ino).await.unwrap();
    assert_eq!(read_joined(&fs, o.fh, 0, 10).await.unwrap()[0], 1);
    origin.put("shoal-test", "v", Bytes::from(vec![2u8; 3_000_000]));
    let e = read_joined(&fs, o.fh, 2_500_000, 10).await.unwrap_err();
    assert_eq!(e.errno(), libc::ESTALE, "{e}");
    // The next open sees the new version, and the page cache is dropped.
    let o2 = fs.open(a.ino).await.unwrap();
    assert!(!o2.keep_cache);
    assert_eq!(read_joined(&fs, o2.fh, 2_500_000, 10).await.unwrap()[0], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_opened_in_listing_order_are_fetched_ahead() {
    let (origin, fs) = setup("").await;
    let body = |d: &str, i: usize| Bytes::from(format!("{d} file {i} ").repeat(i + 1));
    for d in ["walk", "back"] {
        for i in 0..40 {
            origin.put("shoal-test", &format!("{d}/f{i:02}"), body(d, i));
        }
    }
    // S3-like first-byte latency: a fetch ahead has time to matter.
    origin.delay(20);
    let read_all = |dir: u64, names: Vec<(usize, String)>, d: &'static str| {
        let fs = &fs;
        async move {
            for (i, name) in names {
                let a = fs.lookup(dir, &name).await.unwrap();
                let h = fs.open(a.ino).await.unwrap();
                let got = read_joined(fs, h.fh, 0, 1 << 20).await.unwrap();
                assert_eq!(got, body(d, i), "{d}/{name}");
                fs.release(h.fh);
            }
        }
    };
    let ram_or_joined = || {
        let m = &fs.reader().metrics;
        m.blocks.get_or_create(&shoal::cluster::metrics::RAM).get() + m.coalesced_waits.get()
    };

    // In listing order: after two opens, every later file is fetched ahead, once.
    let walk = fs.lookup(ROOT, "walk").await.unwrap();
    let names: Vec<(usize, String)> = fs
        .readdir(walk.ino)
        .await
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, e)| (i, e.name.clone()))
        .collect();
    origin.reset();
    read_all(walk.ino, names.clone(), "walk").await;
    assert_eq!(fs.stats.prefetched_files.load(Relaxed), 38);
    assert_eq!(origin.gets(), 40, "each file once");
    // Each file fetched ahead was read from the RAM tier or joined its fetch.
    assert!(ram_or_joined() >= 38, "{}", ram_or_joined());

    // In reverse order: nothing is fetched ahead, nothing is fetched twice.
    let back = fs.lookup(ROOT, "back").await.unwrap();
    fs.readdir(back.ino).await.unwrap();
    let before = ram_or_joined();
    origin.reset();
    read_all(back.ino, names.into_iter().rev().collect(), "back").await;
    assert_eq!(fs.stats.prefetched_files.load(Relaxed), 38);
    assert_eq!(origin.gets(), 40);
    assert_eq!(ram_or_joined(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directories_opened_in_listing_order_are_listed_ahead() {
    let (origin, fs) = setup("").await;
    for top in ["t", "u"] {
        for d in 0..10 {
            for f in 0..3 {
                let k = format!("{top}/d{d:02}/f{f}");
                origin.put("shoal-test", &k, Bytes::from(k.clone()));
            }
        }
    }
    origin.delay(20);
    // As `find` walks: a directory, then each subdirectory in listing order.
    let walk = |top: &'static str, reverse: bool| {
        let fs = fs.clone();
        async move {
            let root = opendir(&fs, ROOT).await.unwrap();
            let ino = root.iter().find(|e| e.name == top).unwrap().ino;
            let mut dirs: Vec<DirEntry> = opendir(&fs, ino).await.unwrap();
            if reverse {
                dirs.reverse();
            }
            for d in dirs {
                let names: Vec<String> = opendir(&fs, d.ino)
                    .await
                    .unwrap()
                    .iter()
                    .map(|e| e.name.clone())
                    .collect();
                assert_eq!(names, ["f0", "f1", "f2"], "{top}/{}", d.name);
            }
        }
    };
    origin.reset();
    walk("t", false).await;
    // After two in order, every later directory was listed ahead of its visit,
    // and each listing was fetched once (a visit joins the listing in flight).
    assert_eq!(fs.stats.prefetched_listings.load(Relaxed), 8);
    assert_eq!(origin.lists(), 12, "root, t and its 10 directories");
    // In reverse order: nothing ahead, nothing twice.
    origin.reset();
    walk("u", true).await;
    assert_eq!(fs.stats.prefetched_listings.load(Relaxed), 8);
    assert_eq!(origin.lists(), 11, "u and its 10 directories");
    assert_eq!(fs.stats.prefetched_files.load(Relaxed), 0, "no file opened");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walk_down_a_tree_continues_into_each_directory() {
    let (origin, fs) = setup("").await;
    for d in 0..4 {
        for f in 0..3 {
            let k = format!("v/d{d}/f{f}");
            origin.put("shoal-test", &k, Bytes::from(k.clone()));
        }
    }
    // As `tar` or `cp -r` walks: each directory's files in order, then the next
    // directory.
    let root = opendir(&fs, ROOT).await.unwrap();
    let v = opendir(&fs, root[0].ino).await.unwrap();
    origin.reset();
    for d in v.iter() {
        let files = opendir(&fs, d.ino).await.unwrap();
        for f in files.iter() {
            let h = fs.open(f.ino).await.unwrap();
            let got = read_joined(&fs, h.fh, 0, 100).await.unwrap();
            assert_eq!(got, format!("v/{}/{}", d.name, f.name));
            fs.release(h.fh);
        }
    }
    // d0: its third file once two were opened in order. d1 to d3, entered from
    // the walk over v: two files ahead from their first open on.
    assert_eq!(fs.stats.prefetched_files.load(Relaxed), 1 + 3 * 2);
    assert_eq!(origin.gets(), 12, "each file once");
}
