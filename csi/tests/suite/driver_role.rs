//! The driver's own AWS role (`authenticationSource: driver`, the default): the
//! plugin's pod is given IRSA's `AWS_WEB_IDENTITY_TOKEN_FILE` or EKS Pod
//! Identity's `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`, files of its own root. Each
//! mount reads with a copy in its volume's directory (what a unit of the host's
//! systemd can reach; packaging/system/csi-driver-role.sh runs that), owned by a
//! group of its own, and kept up to date as kubelet rotates the token. STS and
//! the container credentials endpoint are the AWS mock; its keys are the
//! origin's only ones.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;

/// The mount's copy of the driver's token named by `var`, from its record.
fn copy_of(state: &Path, target: &Path, var: &str) -> PathBuf {
    for e in std::fs::read_dir(state.join("volumes")).unwrap().flatten() {
        let Ok(text) = std::fs::read_to_string(e.path().join("volume.json")) else {
            continue;
        };
        let r: serde_json::Value = serde_json::from_str(&text).unwrap();
        if r["target"].as_str() == target.to_str() {
            let env = r["env"].as_array().unwrap();
            let v = env
                .iter()
                .find(|kv| kv[0] == var)
                .unwrap_or_else(|| panic!("no {var} in {env:?}"));
            return PathBuf::from(v[1].as_str().unwrap());
        }
    }
    panic!("no record of {}", target.display());
}

/// The environment of the server of the mount whose keeper is on `control`.
fn server_environ(control: &Path) -> Vec<String> {
    let status: serde_json::Value =
        serde_json::from_str(&shoal_mount::keeper::ask(control, "status").unwrap()).unwrap();
    let pid = status["server"].as_u64().expect("a server");
    let raw = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    raw.split(|b| *b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mounts_read_with_the_drivers_web_identity_through_copies_that_follow_its_rotation() {
    let o = origin().await;
    let body = data(400_000, 31);
    o.put(BUCKET, "r/f.bin", body.clone());
    let sts = AwsMock::start(&o, Duration::from_secs(3600)).await;
    sts.grant_web_identity("driver-token-1", ROLE_ARN, &[BUCKET]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = chain_config(dir.path(), &o);
    // The pod's projected token, in a place of the plugin's own.
    let source = dir
        .path()
        .join("pod-root/eks.amazonaws.com/serviceaccount/token");
    std::fs::create_dir_all(source.parent().unwrap()).unwrap();
    std::fs::write(&source, "driver-token-1").unwrap();
    let env: Vec<(String, String)> = [
        ("AWS_WEB_IDENTITY_TOKEN_FILE", source.to_str().unwrap()),
        ("AWS_ROLE_ARN", ROLE_ARN),
        ("AWS_ENDPOINT_URL_STS", &sts.url()),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let plugin = Plugin::start(
        dir.path(),
        &cfg,
        &["--token-refresh=100ms", "--token-group-base=3000000"],
        &env,
    );
    let (_, mut node) = plugin.clients().await;
    let targets: Vec<PathBuf> = (1..=2)
        .map(|i| pod_volume_dir(dir.path(), &format!("p{i}"), &format!("pv{i}")))
        .collect();
    for (i, t) in targets.iter().enumerate() {
        node.node_publish_volume(publish(
            &format!("vol-{i}"),
            t,
            &[("bucket", BUCKET), ("prefix", "r")],
            &[],
        ))
        .await
        .unwrap();
        assert_eq!(std::fs::read(t.join("f.bin")).unwrap(), body);
    }
    assert!(
        sts.hits("sts-web-identity") >= 2,
        "each mount assumed the role"
    );
    let var = "AWS_WEB_IDENTITY_TOKEN_FILE";
    let copies: Vec<PathBuf> = targets
        .iter()
        .map(|t| copy_of(&plugin.state, t, var))
        .collect();
    let mut groups = Vec::new();
    for c in &copies {
        assert!(
            c.starts_with(plugin.state.join("volumes")),
            "{}",
            c.display()
        );
        assert_eq!(std::fs::read_to_string(c).unwrap(), "driver-token-1");
        let m = std::fs::metadata(c).unwrap();
        assert_eq!(m.mode() & 0o777, 0o440, "{}", c.display());
        assert_eq!(m.uid(), m.gid());
        assert!((3_000_000..3_065_536).contains(&m.gid()), "{}", m.gid());
        groups.push(m.gid());
    }
    assert_ne!(
        groups[0], groups[1],
        "each volume's token has a group of its own"
    );
    // What the mounts' servers read: the copy, not the plugin's file.
    for c in &copies {
        let environ = server_environ(&c.parent().unwrap().join("control.sock"));
        let want = format!("{var}={}", c.display());
        assert!(environ.contains(&want), "{want} in {environ:?}");
    }

    // kubelet rotates the token (a new file renamed over it); the old one is
    // then refused by STS. The copies follow, and a new server of each mount
    // assumes the role with the new token.
    sts.grant_web_identity("driver-token-2", ROLE_ARN, &[BUCKET]);
    let next = source.with_extension("new");
    std::fs::write(&next, "driver-token-2").unwrap();
    std::fs::rename(&next, &source).unwrap();
    wait_until(
        "the copies follow the rotation",
        Duration::from_secs(20),
        || {
            copies
                .iter()
                .all(|c| std::fs::read_to_string(c).unwrap() == "driver-token-2")
        },
    );
    sts.revoke_web_identity("driver-token-1");
    for c in &copies {
        let control = c.parent().unwrap().join("control.sock");
        let answer = shoal_mount::keeper::ask(&control, "restart").unwrap();
        assert!(!answer.starts_with("error"), "{answer}");
    }
    for t in &targets {
        assert_eq!(std::fs::read(t.join("f.bin")).unwrap(), body);
    }
    let log = plugin.log_text();
    assert!(log.contains("of the driver's tokens copied again"), "{log}");

    for (i, t) in targets.iter().enumerate() {
        node.node_unpublish_volume(unpublish(&format!("vol-{i}"), t))
            .await
            .unwrap();
    }
    // A token the driver cannot read: the publish says which and why.
    std::fs::remove_file(&source).unwrap();
    let (code, msg) = refused(
        node.node_publish_volume(publish(
            "vol-x",
            &targets[0],
            &[("bucket", BUCKET), ("prefix", "r")],
            &[],
        ))
        .await,
    );
    assert_eq!(code, tonic::Code::Internal, "{msg}");
    assert!(msg.contains(var) && msg.contains("token"), "{msg}");
    assert!(!targets[0].exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mounts_read_with_the_drivers_pod_identity_through_a_copy_of_its_token() {
    let o = origin().await;
    let body = data(200_000, 32);
    o.put(BUCKET, "c/f.bin", body.clone());
    let aws = AwsMock::start(&o, Duration::from_secs(3600)).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = chain_config(dir.path(), &o);
    let source = dir.path().join("pod-root/eks-pod-identity-token");
    std::fs::create_dir_all(source.parent().unwrap()).unwrap();
    std::fs::write(&source, CONTAINER_TOKEN).unwrap();
    let env: Vec<(String, String)> = [
        (
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            format!("{}/container-credentials", aws.url()),
        ),
        (
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
            source.display().to_string(),
        ),
        ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let plugin = Plugin::start(dir.path(), &cfg, &[], &env);
    let (_, mut node) = plugin.clients().await;
    let target = pod_volume_dir(dir.path(), "p1", "pv1");
    node.node_publish_volume(publish(
        "vol-c",
        &target,
        &[("bucket", BUCKET), ("prefix", "c")],
        &[],
    ))
    .await
    .unwrap();
    assert_eq!(std::fs::read(target.join("f.bin")).unwrap(), body);
    assert!(aws.hits("container") >= 1, "the mount asked the endpoint");
    let copy = copy_of(
        &plugin.state,
        &target,
        "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    );
    assert!(copy.starts_with(plugin.state.join("volumes")));
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), CONTAINER_TOKEN);
    assert_eq!(std::fs::metadata(&copy).unwrap().mode() & 0o777, 0o440);
    node.node_unpublish_volume(unpublish("vol-c", &target))
        .await
        .unwrap();
    assert!(!copy.exists(), "the copy goes with its volume");
}
