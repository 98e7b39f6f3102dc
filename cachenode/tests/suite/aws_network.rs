//! Where users run: regions, AWS-style endpoints, proxies, private CAs, and the
//! request options some buckets demand (requester pays, expected owner, SSE-C).
//! Real `shoal-node` processes against the test origin, which answers these the
//! way S3 does.

use std::path::Path;

use crate::common::*;
use bytes::Bytes;
use shoal::store::GetObject;
use shoal_testorigin::{BucketPolicy, ObjectAttrs};

/// The origin's section with `extra` keys in `[origin]`.
fn origin_with(o: &Origin, extra: &str) -> String {
    origin_toml(o).replacen(
        "[origin.credentials]",
        &format!("{extra}\n[origin.credentials]"),
        1,
    )
}

/// A node process with `origin` as its `[origin]` section and `env` added.
fn node(dir: &Path, name: &str, origin: &str, rest: &str, env: &[(&str, String)]) -> NodeProcess {
    let cfg = dir.join(format!("{name}.toml"));
    std::fs::write(
        &cfg,
        node_section(
            origin,
            "",
            &format!("[cache]\nram_size = \"64MiB\"\n{rest}"),
        ),
    )
    .unwrap();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    NodeProcess::spawn_with_env(&cfg, &env)
}

/// A node serving TLS with a certificate from `ca`.
fn tls_node(dir: &Path, ca: &PrivateCa, origin: &str) -> NodeProcess {
    let (cert, key) = ca.server_cert();
    let (cert_f, key_f) = (dir.join("node.pem"), dir.join("node.key"));
    std::fs::write(&cert_f, cert).unwrap();
    std::fs::write(&key_f, key).unwrap();
    let tls = format!(
        "[tls]\ncert = \"{}\"\nkey = \"{}\"\n",
        cert_f.display(),
        key_f.display()
    );
    node(dir, "tls-node", origin, &tls, &[])
}

async fn cold_read(n: &NodeProcess, key: &str) -> Result<Bytes, String> {
    node_s3_client(&n.addr, NODE_KEY, NODE_SECRET)
        .get_bytes(&GetObject::new(BUCKET, key))
        .await
        .map(|(_, b)| b)
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_region_comes_from_aws_region_and_a_wrong_one_is_named() {
    let o = origin().await;
    o.policy.set_bucket(
        BUCKET,
        BucketPolicy {
            region: Some("eu-west-1".into()),
            ..Default::default()
        },
    );
    let body = data(100_000, 1);
    o.put(BUCKET, "r", body.clone());
    let dir = tempfile::tempdir().unwrap();
    // The config names no region: AWS_REGION gives it.
    let with_env = node(
        dir.path(),
        "env",
        &origin_toml(&o),
        "",
        &[("AWS_REGION", "eu-west-1".into())],
    );
    assert_eq!(cold_read(&with_env, "r").await.unwrap(), body);
    // Nothing gives it: us-east-1, and the error says where the bucket is.
    let none = node(dir.path(), "none", &origin_toml(&o), "", &[]);
    let err = cold_read(&none, "r").await.unwrap_err();
    assert!(
        err.contains("eu-west-1") && err.contains("origin.region"),
        "the error names the bucket's region and the key to set: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aws_style_endpoint_follows_the_buckets_region() {
    let o = origin().await;
    o.policy.set_bucket(
        BUCKET,
        BucketPolicy {
            region: Some("ap-southeast-2".into()),
            ..Default::default()
        },
    );
    let body = data(2 << 20, 2);
    o.put(BUCKET, "follow", body.clone());
    let dir = tempfile::tempdir().unwrap();
    // No endpoint in the config: AWS's, overridden the way the SDKs allow.
    let origin = origin_toml(&o).replacen(&format!("endpoint = \"{}\"\n", o.endpoint()), "", 1);
    let n = node(
        dir.path(),
        "aws",
        &origin,
        "",
        &[("AWS_ENDPOINT_URL_S3", o.endpoint())],
    );
    assert_eq!(cold_read(&n, "follow").await.unwrap(), body);
    let lines = n.wait_log_lines("following it", 1);
    assert!(
        lines.iter().any(|l| l.contains("ap-southeast-2")),
        "the node said it followed the bucket: {lines:?}"
    );
    // Listings (passed through) follow too.
    let page = node_s3_client(&n.addr, NODE_KEY, NODE_SECRET)
        .list_all(BUCKET, "", None)
        .await
        .unwrap();
    assert_eq!(page.objects.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_traffic_goes_through_the_proxy_and_node_traffic_never_does() {
    let o = origin().await;
    let proxy = Proxy::start().await;
    let dir = tempfile::tempdir().unwrap();
    let env = [("HTTP_PROXY", proxy.url())];
    // An owner node and a gateway in front of it, both told of the proxy.
    let owner = node(dir.path(), "owner", &origin_toml(&o), "", &env);
    let gateway = node(
        dir.path(),
        "gateway",
        &origin_toml(&o),
        &cluster_toml(&[&owner.addr], ""),
        &env,
    );
    let body = data(3 << 20, 3);
    o.put(BUCKET, "via-proxy", body.clone());
    assert_eq!(cold_read(&gateway, "via-proxy").await.unwrap(), body);
    let seen = proxy.seen();
    let origin_addr = o.addr.to_string();
    assert!(
        seen.contains(&origin_addr),
        "origin traffic went through the proxy: {seen:?}"
    );
    assert!(
        seen.iter().all(|s| *s == origin_addr),
        "only origin traffic went through the proxy: {seen:?}"
    );
    let text = scrape(&gateway.addr).await;
    assert!(
        metric(&text, "shoal_node_cluster_fetches_total") >= 1.0,
        "the gateway asked its owner"
    );

    // NO_PROXY names the origin: it is reached directly.
    let before = proxy.seen().len();
    let direct = node(
        dir.path(),
        "direct",
        &origin_toml(&o),
        "",
        &[
            ("HTTP_PROXY", proxy.url()),
            ("NO_PROXY", "127.0.0.1".into()),
        ],
    );
    o.put(BUCKET, "direct", body.clone());
    assert_eq!(cold_read(&direct, "direct").await.unwrap(), body);
    assert_eq!(proxy.seen().len(), before, "NO_PROXY bypassed the proxy");

    // origin.proxy names it without any environment.
    let keyed = node(
        dir.path(),
        "keyed",
        &origin_with(&o, &format!("proxy = \"{}\"", proxy.url())),
        "",
        &[],
    );
    o.put(BUCKET, "keyed", body.clone());
    assert_eq!(cold_read(&keyed, "keyed").await.unwrap(), body);
    assert!(proxy.seen().len() > before, "origin.proxy was used");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_ca_is_trusted_from_ca_bundle_or_aws_ca_bundle_and_for_cluster_tls() {
    let ca = PrivateCa::new("shoal test CA");
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.root_pem()).unwrap();
    let o = shoal_testorigin::Origin::start(shoal_testorigin::OriginOptions {
        tls: Some(ca.server_cert()),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(o.endpoint().starts_with("https://"));
    let body = data(1 << 20, 4);
    o.put(BUCKET, "tls", body.clone());

    let untrusting = node(dir.path(), "plain", &origin_toml(&o), "", &[]);
    let err = cold_read(&untrusting, "tls").await.unwrap_err();
    assert!(
        err.contains("ca_bundle") && err.contains("AWS_CA_BUNDLE"),
        "{err}"
    );

    let keyed = node(
        dir.path(),
        "keyed",
        &origin_with(&o, &format!("ca_bundle = \"{}\"", ca_file.display())),
        "",
        &[],
    );
    assert_eq!(cold_read(&keyed, "tls").await.unwrap(), body);

    let env = node(
        dir.path(),
        "env",
        &origin_toml(&o),
        "",
        &[("AWS_CA_BUNDLE", ca_file.display().to_string())],
    );
    assert_eq!(cold_read(&env, "tls").await.unwrap(), body);

    // A node serving TLS with a certificate from the same CA, and a gateway that
    // reaches it with cluster.tls and cluster.ca_bundle.
    let tls_node = tls_node(
        dir.path(),
        &ca,
        &origin_with(&o, &format!("ca_bundle = \"{}\"", ca_file.display())),
    );
    let gateway = node(
        dir.path(),
        "gateway",
        &origin_with(&o, &format!("ca_bundle = \"{}\"", ca_file.display())),
        &cluster_toml(
            &[&tls_node.addr],
            &format!("tls = true\nca_bundle = \"{}\"", ca_file.display()),
        ),
        &[],
    );
    o.put(BUCKET, "tls2", body.clone());
    assert_eq!(cold_read(&gateway, "tls2").await.unwrap(), body);
    let text = scrape(&gateway.addr).await;
    assert!(
        metric(&text, "shoal_node_cluster_fetches_total") >= 1.0,
        "fetched from the TLS node"
    );
    every_block_from_the_node(&text, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requester_pays_expected_owner_and_sse_c_are_sent_when_configured() {
    use base64::Engine;
    use md5::Digest;
    let o = origin().await;
    o.policy.set_bucket(
        BUCKET,
        BucketPolicy {
            requester_pays: true,
            owner: Some("111122223333".into()),
            ..Default::default()
        },
    );
    let key = [7u8; 32];
    let b64 = base64::engine::general_purpose::STANDARD;
    let body = data(1 << 20, 5);
    o.put_with(
        BUCKET,
        "sealed",
        body.clone(),
        ObjectAttrs {
            sse_customer_key_md5: Some(b64.encode(md5::Md5::digest(key))),
            ..Default::default()
        },
    );
    o.put(BUCKET, "open", body.clone());
    let dir = tempfile::tempdir().unwrap();

    let bare = node(dir.path(), "bare", &origin_toml(&o), "", &[]);
    let err = cold_read(&bare, "open").await.unwrap_err();
    assert!(
        err.contains("requester_pays"),
        "the error points at requester pays: {err}"
    );

    let paying = origin_with(
        &o,
        "requester_pays = true\nexpected_bucket_owner = \"111122223333\"",
    );
    let payer = node(dir.path(), "payer", &paying, "", &[]);
    assert_eq!(cold_read(&payer, "open").await.unwrap(), body);
    let page = node_s3_client(&payer.addr, NODE_KEY, NODE_SECRET)
        .list_all(BUCKET, "", None)
        .await
        .expect("listings carry the headers too");
    assert_eq!(page.objects.len(), 2);
    assert!(
        cold_read(&payer, "sealed").await.is_err(),
        "no SSE-C key, no sealed object"
    );

    let wrong_owner = node(
        dir.path(),
        "wrong-owner",
        &origin_with(
            &o,
            "requester_pays = true\nexpected_bucket_owner = \"999999999999\"",
        ),
        "",
        &[],
    );
    assert!(cold_read(&wrong_owner, "open").await.is_err());

    let sse = node(
        dir.path(),
        "sse",
        &origin_with(
            &o,
            "requester_pays = true\nexpected_bucket_owner = \"111122223333\"\nsse_customer_key_env = \"SHOAL_TEST_SSE_KEY\"",
        ),
        "",
        &[("SHOAL_TEST_SSE_KEY", b64.encode(key))],
    );
    assert_eq!(cold_read(&sse, "sealed").await.unwrap(), body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn irsa_reaches_sts_and_the_origin_through_a_connect_proxy() {
    let ca = PrivateCa::new("shoal test CA");
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.root_pem()).unwrap();
    let o = shoal_testorigin::Origin::start(shoal_testorigin::OriginOptions {
        tls: Some(ca.server_cert()),
        ..Default::default()
    })
    .await
    .unwrap();
    let sts = AwsMock::start_tls(&o, std::time::Duration::from_secs(3600), ca.server_cert()).await;
    assert!(sts.url().starts_with("https://"));
    let token = dir.path().join("irsa-token");
    std::fs::write(&token, "eyJhbGciOi.pod-token").unwrap();
    sts.expect_web_identity_token("eyJhbGciOi.pod-token");
    let proxy = Proxy::start().await;
    let body = data(1 << 20, 9);
    o.put(BUCKET, "irsa", body.clone());
    // No keys anywhere: the chain's web identity, with STS and the origin both
    // HTTPS behind the proxy, trusted through the origin's ca_bundle.
    let origin = format!(
        "[origin]\nendpoint = \"{}\"\nregion = \"us-east-1\"\nca_bundle = \"{}\"\n",
        o.endpoint(),
        ca_file.display()
    );
    let env = [
        ("HTTPS_PROXY", proxy.url()),
        ("NO_PROXY", String::new()),
        ("AWS_WEB_IDENTITY_TOKEN_FILE", token.display().to_string()),
        ("AWS_ROLE_ARN", ROLE_ARN.to_owned()),
        ("AWS_ROLE_SESSION_NAME", "shoal-test".to_owned()),
        ("AWS_ENDPOINT_URL_STS", sts.url()),
        ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
        ("AWS_ACCESS_KEY_ID", String::new()),
        ("AWS_SECRET_ACCESS_KEY", String::new()),
        (
            "AWS_CONFIG_FILE",
            dir.path().join("no-config").display().to_string(),
        ),
        (
            "AWS_SHARED_CREDENTIALS_FILE",
            dir.path().join("no-credentials").display().to_string(),
        ),
    ];
    let n = node(dir.path(), "irsa", &origin, "", &env);
    assert_eq!(cold_read(&n, "irsa").await.unwrap(), body);
    let tunnels = proxy.tunnels();
    assert!(
        tunnels.contains(&sts.addr.to_string()),
        "STS was reached through a CONNECT tunnel: {tunnels:?}"
    );
    assert!(
        tunnels.contains(&o.addr.to_string()),
        "the origin was reached through a CONNECT tunnel: {tunnels:?}"
    );
    assert!(sts.hits("sts-web-identity") >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_proxy_carries_node_traffic_and_aws_ca_bundle_trusts_cluster_tls() {
    let ca = PrivateCa::new("shoal test CA");
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.root_pem()).unwrap();
    let o = origin().await;
    let tls_node = tls_node(dir.path(), &ca, &origin_toml(&o));
    // The gateway trusts the node's CA from AWS_CA_BUNDLE alone, and reaches it
    // through cluster.proxy (a CONNECT tunnel, the node being HTTPS).
    let proxy = Proxy::start().await;
    let gateway = node(
        dir.path(),
        "gateway",
        &origin_toml(&o),
        &cluster_toml(
            &[&tls_node.addr],
            &format!("tls = true\nproxy = \"{}\"", proxy.url()),
        ),
        &[("AWS_CA_BUNDLE", ca_file.display().to_string())],
    );
    let body = data(2 << 20, 10);
    o.put(BUCKET, "via-cluster-proxy", body.clone());
    assert_eq!(
        cold_read(&gateway, "via-cluster-proxy").await.unwrap(),
        body
    );
    let text = scrape(&gateway.addr).await;
    assert!(
        metric(&text, "shoal_node_cluster_fetches_total") >= 1.0,
        "the gateway asked its owner"
    );
    every_block_from_the_node(&text, 2);
    let tunnels = proxy.tunnels();
    assert!(
        tunnels
            .iter()
            .any(|t| t.ends_with(&format!(":{}", tls_node.socket_addr().port()))),
        "node traffic went through cluster.proxy: {tunnels:?}"
    );
    assert!(
        !proxy.seen().contains(&o.addr.to_string()),
        "origin traffic did not: cluster.proxy is the cluster's only"
    );
}

/// That a gateway's `blocks` cluster blocks all came from its node, none from the
/// origin: counted as the node's, and no fallback of any cause.
fn every_block_from_the_node(text: &str, blocks: u64) {
    assert_eq!(
        metric(text, "shoal_client_blocks_total{source=\"node\"}"),
        blocks as f64,
        "blocks from the node:\n{text}"
    );
    assert_eq!(
        metric(text, "shoal_client_blocks_total{source=\"origin\"}"),
        0.0,
        "a block came from the origin:\n{text}"
    );
    assert_eq!(
        metric_sum(text, "shoal_client_fallbacks_total"),
        0.0,
        "a block fell back to the origin:\n{text}"
    );
}
