//! Every labelled family a node knows is on its `/metrics` page from the
//! start, each label value it knows at 0, so that a dashboard's `rate()` and a
//! test tell 0 from a series that is not there; a family whose values are not
//! known in advance (requests by status) is declared with no series yet.

use crate::common::*;

/// The series of family `name` on `text`, with their values.
fn series<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .collect()
}

#[tokio::test]
async fn a_fresh_nodes_page_has_every_series_it_knows_at_0() {
    let origin = origin().await;
    let owner = node_for(&origin, "", "").await;
    let keys =
        "[[auth.keys]]\naccess_key_id = \"hammer\"\nsecret_access_key = \"hammer-secret-0123\"\n\
                max_requests_per_second = 2\nburst_requests = 2\n";
    let id = owner.addr.to_string();
    let gw_cluster = cluster_toml(&[id.as_str()], "hop_limit = 2");
    let gw = node_for(&origin, "", &format!("{keys}{gw_cluster}")).await;
    let text = scrape(gw.addr).await;

    let zero = |s: &str| assert_eq!(metric(&text, s), 0.0, "{s}");
    for tier in ["ram", "disk", "origin"] {
        zero(&format!("shoal_node_bytes_served_total{{tier=\"{tier}\"}}"));
    }
    for family in ["hits", "misses", "evictions"] {
        for tier in ["ram", "disk"] {
            zero(&format!("shoal_node_{family}_total{{tier=\"{tier}\"}}"));
        }
    }
    for kind in [
        "block",
        "range",
        "head",
        "list",
        "bucket",
        "object",
        "cluster_head",
    ] {
        zero(&format!(
            "shoal_node_origin_requests_total{{kind=\"{kind}\"}}"
        ));
    }
    for status in ["hit", "miss", "stale", "bypass"] {
        zero(&format!(
            "shoal_node_cache_status_total{{status=\"{status}\"}}"
        ));
    }
    for result in ["hit", "miss", "timeout", "error"] {
        for family in ["peer_fills", "owner_fills"] {
            zero(&format!("shoal_node_{family}_total{{result=\"{result}\"}}"));
        }
        zero(&format!(
            "shoal_node_peer_metadata_fills_total{{op=\"head\",result=\"{result}\"}}"
        ));
    }
    zero("shoal_node_metadata_requests_total{op=\"list\",result=\"coalesced\"}");
    zero("shoal_node_writes_total{kind=\"multipart_complete\"}");
    zero("shoal_node_invalidations_total{kind=\"fanout\"}");
    zero("shoal_node_fanout_batches_total{kind=\"failed\"}");
    // A gateway's forwards by hop count, below its hop limit of 2.
    assert_eq!(
        series(&text, "shoal_node_forwarded_total").len(),
        2,
        "{text}"
    );
    zero("shoal_node_forwarded_total{hop=\"1\"}");
    // Its keys: their requests, and each refusal a key can meet.
    zero(&format!(
        "shoal_node_key_requests_total{{key=\"{NODE_KEY}\"}}"
    ));
    zero("shoal_node_key_requests_total{key=\"hammer\"}");
    zero("shoal_node_refusals_total{key=\"\",reason=\"unsigned\"}");
    zero("shoal_node_refusals_total{key=\"hammer\",reason=\"requests\"}");
    zero(&format!(
        "shoal_node_refusals_total{{key=\"{NODE_KEY}\",reason=\"scope\"}}"
    ));
    assert!(
        series(&text, "shoal_node_refusals_total")
            .iter()
            .all(|s| !s.contains(&format!("key=\"{NODE_KEY}\",reason=\"requests\""))),
        "a refusal for a limit the key has not: {text}"
    );
    // The gateway's reader: every source and cause, and its node.
    for source in ["ram", "node", "origin"] {
        zero(&format!("shoal_client_blocks_total{{source=\"{source}\"}}"));
    }
    for cause in [
        "connect",
        "first_byte",
        "stall",
        "error",
        "down",
        "no_nodes",
        "zone_down",
        "shed",
    ] {
        zero(&format!(
            "shoal_client_fallbacks_total{{cause=\"{cause}\"}}"
        ));
        zero(&format!(
            "shoal_client_metadata_fallbacks_total{{cause=\"{cause}\"}}"
        ));
    }
    zero("shoal_client_metadata_requests_total{op=\"list\",source=\"origin\"}");
    zero(&format!(
        "shoal_client_node_requests_total{{node=\"{}\"}}",
        owner.addr
    ));
    // Requests by method and status: no value known before the first, but the
    // family is declared, so a test reads 0 for a status not answered yet and
    // fails on a misspelt family.
    assert!(
        text.contains("# TYPE shoal_node_requests_total counter\n"),
        "{text}"
    );
    let status = "shoal_node_requests_total{method=\"GET\",status=\"416\"}";
    assert_eq!(metric_or_zero(&text, status), 0.0);
    let misspelt = "shoal_node_request_total{method=\"GET\",status=\"416\"}";
    assert!(std::panic::catch_unwind(|| metric_or_zero(&text, misspelt)).is_err());
    // So a zero-valued series cannot be taken for one counted: a read moves them.
    origin.put(BUCKET, "m", data(10, 1));
    client(gw.addr)
        .get_bytes(&shoal::store::GetObject::new(BUCKET, "m"))
        .await
        .unwrap();
    let after = scrape(gw.addr).await;
    assert!(
        metric(&after, "shoal_client_blocks_total{source=\"node\"}") >= 1.0,
        "{after}"
    );
    assert!(
        metric_or_zero(
            &after,
            "shoal_node_requests_total{method=\"GET\",status=\"200\"}"
        ) >= 1.0
    );
}
