//! A node's served bytes are the bytes it sent: `shoal_node_bytes_served_total`
//! grows by what each client received, whatever the read (a whole object cut
//! through as it arrives, a range inside blocks held, a small read deep in a
//! cold block answered by a side read, a range across a cold block's end, two
//! readers of one fetch), never by the blocks a range touched.

use futures_util::StreamExt;
use shoal::store::{ByteRange, GetObject, ObjectStore};
use shoal_testorigin::FaultSettings;

use crate::common::*;

const MIB: u64 = 1 << 20;

/// A read of the test: what it is, the key, its body, its range (`None`: whole).
type Read<'a> = (&'a str, &'a str, &'a bytes::Bytes, Option<(u64, u64)>);

/// The node's body bytes served so far, every tier together.
async fn served(node: &TestNode) -> u64 {
    let text = scrape(node.addr).await;
    assert!(
        text.contains("shoal_node_bytes_served_total"),
        "no served bytes on the node's page:\n{text}"
    );
    metric_sum(&text, "shoal_node_bytes_served_total") as u64
}

/// `range` of `key` through the node, read to its end and checked against
/// `body`: the bytes received.
async fn get(node: &TestNode, key: &str, body: &bytes::Bytes, range: Option<(u64, u64)>) -> u64 {
    let mut req = GetObject::new(BUCKET, key);
    if let Some((lo, hi)) = range {
        req = req.range(ByteRange::span(lo, hi));
    }
    let (lo, hi) = range.unwrap_or((0, body.len() as u64));
    let resp = client(node.addr).get_range(&req).await.unwrap();
    let mut got = Vec::new();
    let mut s = resp.body;
    while let Some(c) = s.next().await {
        got.extend_from_slice(&c.unwrap());
    }
    assert!(got[..] == body[lo as usize..hi as usize], "{key} {range:?}");
    got.len() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_bytes_are_the_bytes_clients_received() {
    let origin = origin().await;
    let a = data(8 * MIB as usize, 71);
    let b = data(8 * MIB as usize, 72);
    let c = data(2 * MIB as usize, 73);
    origin.put(BUCKET, "a", a.clone());
    origin.put(BUCKET, "b", b.clone());
    origin.put(BUCKET, "c", c.clone());
    let node = node_for(&origin, "", "[cache]\nram_size = \"64MiB\"").await;
    // A first read puts the family on the node's page.
    let p = data(4096, 74);
    origin.put(BUCKET, "p", p.clone());
    get(&node, "p", &p, None).await;

    let mut rows = Vec::new();
    let mut check = |what: &str, sent: u64, got: u64| {
        rows.push(format!("{what:<44} received {got:>9}  served {sent:>9}"));
        (sent as f64 - got as f64).abs() <= got as f64 * 0.01
    };
    let mut wrong = Vec::new();
    let reads: [Read; 6] = [
        ("whole, cold: cut through", "a", &a, None),
        (
            "ranged across held blocks",
            "a",
            &a,
            Some((MIB + MIB / 2, 3 * MIB + MIB / 4)),
        ),
        (
            "4 KiB inside a held block",
            "a",
            &a,
            Some((5 * MIB + 100, 5 * MIB + 4196)),
        ),
        (
            "64 KiB deep in a cold block: a side read",
            "b",
            &b,
            Some((5 * MIB + MIB / 2, 5 * MIB + MIB / 2 + (64 << 10))),
        ),
        (
            "across a cold block's end",
            "b",
            &b,
            Some((2 * MIB - 1000, 2 * MIB + 1000)),
        ),
        ("whole again, held", "a", &a, None),
    ];
    for (what, key, body, range) in reads {
        let before = served(&node).await;
        let got = get(&node, key, body, range).await;
        let sent = served(&node).await - before;
        if !check(what, sent, got) {
            wrong.push(what);
        }
    }
    // Two readers of one cold fetch, the origin paced so that both stream it
    // as it arrives: one started the fetch, the other joined it.
    origin.faults.set(FaultSettings {
        bandwidth_bytes_per_sec: 4 * MIB,
        ..Default::default()
    });
    let before = served(&node).await;
    let (x, y) = tokio::join!(
        get(&node, "c", &c, None),
        get(&node, "c", &c, Some((MIB / 2, MIB + MIB / 2)))
    );
    origin.faults.clear();
    let sent = served(&node).await - before;
    if !check("two readers of one cold fetch", sent, x + y) {
        wrong.push("two readers of one cold fetch");
    }
    eprintln!("{}", rows.join("\n"));
    assert!(
        wrong.is_empty(),
        "served bytes are not what was received for {wrong:?}:\n{}",
        rows.join("\n")
    );
}
