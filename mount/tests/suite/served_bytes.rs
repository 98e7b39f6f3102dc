//! A node's served bytes are the bytes it sent: through a mount, what the
//! node's `shoal_node_bytes_served_total` grows by is what the mount received
//! from it (`shoal_client_bytes_total{source="node"}`), for a sequential read
//! (`cat`) and for random reads, within 1%.

use std::os::unix::fs::FileExt;

use rand::{Rng, SeedableRng};

use crate::common::*;

/// Whether `served` is within 1% of `received`.
fn close(received: u64, served: u64) -> bool {
    (served as f64 - received as f64).abs() <= received as f64 * 0.01
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_served_bytes_are_what_a_mount_received() {
    let o = origin().await;
    let seq = data(64 << 20, 81);
    let random = data(32 << 20, 82);
    o.put(BUCKET, "seq.bin", seq.clone());
    o.put(BUCKET, "random.bin", random.clone());
    let small = data(4096, 84);
    o.put(BUCKET, "small.bin", small.clone());
    let ndir = tempfile::tempdir().unwrap();
    let node = start_node(&o, ndir.path(), "n");
    let addr = free_addr();
    let m = Mount::start(
        &mount_toml(&o, &[&node], ""),
        BUCKET,
        &["--metrics-addr", &addr],
    );

    // A first read puts the labelled families on both pages.
    assert!(std::fs::read(m.path("small.bin")).unwrap() == small[..]);

    // One cold `cat` of a 64 MiB file, compared byte for byte.
    let local = ndir.path().join("seq.bin");
    std::fs::write(&local, &seq).unwrap();
    let (m0, n0) = settled_bytes(&addr, &node.addr).await;
    sh_ok(&format!(
        "cat {} | cmp - {}",
        q(&m.path("seq.bin")),
        q(&local)
    ))
    .await;
    let (m1, n1) = settled_bytes(&addr, &node.addr).await;
    let sequential = (m1 - m0, n1 - n0);

    // 200 reads of 4 KiB to 256 KiB anywhere in a 32 MiB file, each checked.
    let path = m.path("random.bin");
    let body = random.clone();
    tokio::task::spawn_blocking(move || {
        let f = std::fs::File::open(path).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(83);
        for _ in 0..200 {
            let len = rng.random_range(4096..=(256 << 10));
            let at = rng.random_range(0..body.len() - len);
            let mut buf = vec![0u8; len];
            f.read_exact_at(&mut buf, at as u64).unwrap();
            assert!(buf[..] == body[at..at + len], "{len} bytes at {at}");
        }
    })
    .await
    .unwrap();
    let (m2, n2) = settled_bytes(&addr, &node.addr).await;
    let random_reads = (m2 - m1, n2 - n1);

    eprintln!(
        "received from the node / served by it: sequential {sequential:?}, random {random_reads:?}"
    );
    assert!(
        sequential.0 >= seq.len() as u64,
        "the cat read {sequential:?}"
    );
    assert!(
        random_reads.0 > 0,
        "the random reads read nothing from the node"
    );
    for (what, (received, served)) in [("sequential", sequential), ("random", random_reads)] {
        assert!(
            close(received, served),
            "{what}: the mount received {received} bytes from the node, which says it served {served}"
        );
    }
}
