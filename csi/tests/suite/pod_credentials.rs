//! `authenticationSource: pod`: each volume reads with the role of its pod's own
//! ServiceAccount, through the token kubelet hands over (the CSIDriver's
//! `tokenRequests`), and two pods with different roles never share a mount.
//! STS is the web-identity mock (each token good for one role, each role for one
//! bucket), the ServiceAccounts come from a mock of the Kubernetes API.

use std::time::Duration;

use tonic::Code;

use crate::common::*;

const ROLE_A: &str = "arn:aws:iam::123456789012:role/team-a";
const ROLE_B: &str = "arn:aws:iam::123456789012:role/team-b";
const ROLE_C: &str = "arn:aws:iam::123456789012:role/team-c";

/// The volume context kubelet builds for pod `pod` of ServiceAccount `ns/sa`,
/// with `token` for audience sts.amazonaws.com.
fn pod_context<'a>(
    bucket: &'a str,
    ns: &'a str,
    sa: &'a str,
    pod: &'a str,
    tokens: &'a str,
) -> Vec<(&'a str, &'a str)> {
    vec![
        ("bucket", bucket),
        ("authenticationSource", "pod"),
        ("csi.storage.k8s.io/pod.name", pod),
        ("csi.storage.k8s.io/pod.namespace", ns),
        ("csi.storage.k8s.io/pod.uid", pod),
        ("csi.storage.k8s.io/serviceAccount.name", sa),
        ("csi.storage.k8s.io/serviceAccount.tokens", tokens),
    ]
}

fn tokens(token: &str) -> String {
    serde_json::json!({
        "sts.amazonaws.com": {"token": token, "expirationTimestamp": "2030-01-01T00:00:00Z"}
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_volume_reads_with_its_pods_own_role() {
    let o = shoal_testorigin::Origin::start(shoal_testorigin::OriginOptions {
        buckets: vec!["alpha".into(), "beta".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let (a, b) = (data(300_000, 1), data(200_000, 2));
    o.put("alpha", "a.bin", a.clone());
    o.put("beta", "b.bin", b.clone());
    let sts = AwsMock::start(&o, Duration::from_secs(3600)).await;
    sts.grant_web_identity("token-of-pod-a", ROLE_A, &["alpha"]);
    sts.grant_web_identity("token-of-pod-b", ROLE_B, &["beta"]);
    let kube = KubeApi::start().await;
    kube.service_account(
        "ns-a",
        "reader-a",
        &[("eks.amazonaws.com/role-arn", ROLE_A)],
    );
    kube.service_account(
        "ns-b",
        "reader-b",
        &[("eks.amazonaws.com/role-arn", ROLE_B)],
    );
    kube.service_account("ns-c", "no-role", &[]);

    let dir = tempfile::tempdir().unwrap();
    // No keys in the config: the credential chain, which finds the pod's token.
    let cfg = chain_config(dir.path(), &o);
    let token_file = dir.path().join("kube-token");
    std::fs::write(&token_file, &kube.token).unwrap();
    let env = vec![
        ("AWS_ENDPOINT_URL_STS".to_owned(), sts.url()),
        ("AWS_EC2_METADATA_DISABLED".to_owned(), "true".to_owned()),
    ];
    let plugin = Plugin::start(
        dir.path(),
        &cfg,
        &[
            &format!("--kube-api={}", kube.url()),
            &format!("--kube-token-file={}", token_file.display()),
        ],
        &env,
    );
    let (_, mut node) = plugin.clients().await;

    let (ta, tb) = (tokens("token-of-pod-a"), tokens("token-of-pod-b"));
    let target_a = pod_volume_dir(dir.path(), "pod-a", "pv-a");
    let target_b = pod_volume_dir(dir.path(), "pod-b", "pv-b");
    node.node_publish_volume(publish(
        "vol-a",
        &target_a,
        &pod_context("alpha", "ns-a", "reader-a", "pod-a", &ta),
        &[],
    ))
    .await
    .unwrap();
    node.node_publish_volume(publish(
        "vol-b",
        &target_b,
        &pod_context("beta", "ns-b", "reader-b", "pod-b", &tb),
        &[],
    ))
    .await
    .unwrap();
    assert_eq!(std::fs::read(target_a.join("a.bin")).unwrap(), a);
    assert_eq!(std::fs::read(target_b.join("b.bin")).unwrap(), b);
    assert!(
        sts.hits("sts-web-identity") >= 2,
        "each mount assumed its role"
    );
    assert!(kube.reads() >= 2, "each role came from its ServiceAccount");

    // Pod B's role does not reach alpha: the mounts really read as different roles.
    let target_x = pod_volume_dir(dir.path(), "pod-x", "pv-x");
    let (code, msg) = refused(
        node.node_publish_volume(publish(
            "vol-x",
            &target_x,
            &pod_context("alpha", "ns-b", "reader-b", "pod-x", &tb),
            &[],
        ))
        .await,
    );
    assert_eq!(code, Code::Internal, "{msg}");
    assert!(msg.contains("denied"), "{msg}");
    assert!(!target_x.exists());

    // A token STS refuses fails the publish, saying so.
    let (code, msg) = refused(
        node.node_publish_volume(publish(
            "vol-y",
            &target_x,
            &pod_context(
                "alpha",
                "ns-a",
                "reader-a",
                "pod-y",
                &tokens("forged-token"),
            ),
            &[],
        ))
        .await,
    );
    assert_eq!(code, Code::Internal, "{msg}");
    assert!(
        msg.contains("web identity"),
        "the mount says what failed: {msg}"
    );
    // No role on the ServiceAccount, or no token for STS: invalid, before any mount.
    let (code, msg) = refused(
        node.node_publish_volume(publish(
            "vol-z",
            &target_x,
            &pod_context("alpha", "ns-c", "no-role", "pod-z", &ta),
            &[],
        ))
        .await,
    );
    assert_eq!(code, Code::InvalidArgument, "{msg}");
    assert!(msg.contains("eks.amazonaws.com/role-arn"), "{msg}");
    let no_sts =
        serde_json::json!({"other": {"token": "t", "expirationTimestamp": ""}}).to_string();
    let (code, msg) = refused(
        node.node_publish_volume(publish(
            "vol-z",
            &target_x,
            &pod_context("alpha", "ns-a", "reader-a", "pod-z", &no_sts),
            &[],
        ))
        .await,
    );
    assert_eq!(code, Code::InvalidArgument, "{msg}");
    assert!(msg.contains("sts.amazonaws.com"), "{msg}");

    // A republish (requiresRepublish) brings a fresh token; the mount reads on.
    sts.grant_web_identity("fresh-token-of-pod-a", ROLE_A, &["alpha"]);
    node.node_publish_volume(publish(
        "vol-a",
        &target_a,
        &pod_context(
            "alpha",
            "ns-a",
            "reader-a",
            "pod-a",
            &tokens("fresh-token-of-pod-a"),
        ),
        &[],
    ))
    .await
    .unwrap();
    let written: Vec<String> = std::fs::read_dir(plugin.state.join("volumes"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("token")).ok())
        .collect();
    assert!(
        written.contains(&"fresh-token-of-pod-a".to_owned()),
        "{written:?}"
    );
    assert_eq!(std::fs::read(target_a.join("a.bin")).unwrap(), a);

    // A staged volume: pods of one ServiceAccount share a mount; a pod of
    // another gets one of its own, reading with its own role, never the first's.
    sts.grant_web_identity("token-of-pod-c", ROLE_C, &["alpha"]);
    kube.service_account(
        "ns-a",
        "reader-c",
        &[("eks.amazonaws.com/role-arn", ROLE_C)],
    );
    let shares = || {
        std::fs::read_dir(plugin.state.join("shares"))
            .unwrap()
            .count()
    };
    let staging = staging_dir(dir.path(), "pv-s");
    let staged = [("bucket", "alpha"), ("authenticationSource", "pod")];
    node.node_stage_volume(stage("vol-s", &staging, &staged, &[]))
        .await
        .unwrap();
    assert!(
        !is_mounted(&staging),
        "whose mount it is is known at publish"
    );
    let pods = ["s1", "s2", "sc", "sb"];
    let targets: Vec<_> = pods
        .iter()
        .map(|p| pod_volume_dir(dir.path(), p, "pv-s"))
        .collect();
    let tc = tokens("token-of-pod-c");
    for (i, sa, t) in [(0, "reader-a", &ta), (1, "reader-a", &ta)] {
        node.node_publish_volume(publish_staged(
            "vol-s",
            &staging,
            &targets[i],
            &pod_context("alpha", "ns-a", sa, pods[i], t),
            &[],
        ))
        .await
        .unwrap();
        assert_eq!(std::fs::read(targets[i].join("a.bin")).unwrap(), a);
    }
    assert_eq!(shares(), 1, "two pods of one ServiceAccount share a mount");
    let assumed = sts.hits("sts-web-identity");
    node.node_publish_volume(publish_staged(
        "vol-s",
        &staging,
        &targets[2],
        &pod_context("alpha", "ns-a", "reader-c", pods[2], &tc),
        &[],
    ))
    .await
    .unwrap();
    assert_eq!(std::fs::read(targets[2].join("a.bin")).unwrap(), a);
    assert_eq!(shares(), 2, "another ServiceAccount: a mount of its own");
    assert!(
        sts.hits("sts-web-identity") > assumed,
        "it assumed its own role"
    );
    // Pod B's role does not reach alpha: its publish of the same volume fails,
    // where a mount shared by volume alone would have let it read.
    let (code, msg) = refused(
        node.node_publish_volume(publish_staged(
            "vol-s",
            &staging,
            &targets[3],
            &pod_context("alpha", "ns-b", "reader-b", pods[3], &tb),
            &[],
        ))
        .await,
    );
    assert_eq!(code, Code::Internal, "{msg}");
    assert!(msg.contains("denied"), "{msg}");
    assert_eq!(shares(), 2);
    for t in &targets[..3] {
        node.node_unpublish_volume(unpublish("vol-s", t))
            .await
            .unwrap();
    }
    node.node_unstage_volume(unstage("vol-s", &staging))
        .await
        .unwrap();
    assert_eq!(shares(), 0, "no mount outlives its last publish");

    for (v, t) in [("vol-a", &target_a), ("vol-b", &target_b)] {
        node.node_unpublish_volume(unpublish(v, t)).await.unwrap();
    }
}
