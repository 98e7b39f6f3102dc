//! Credentials from the AWS chain, as on EC2, EKS, ECS and a laptop with profiles:
//! each provider against mock services on loopback ([`AwsMock`]), with a config
//! that names no keys. The test origin accepts only the temporary key, secret and
//! session token the mock issued, and refuses them once expired; `shoal-mount`
//! mounts and reads byte-exact, and a `shoal-node` serves a cold read.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::*;
use shoal::store::GetObject;

/// An `[origin]` for `o` with no keys, the chain's to find.
fn keyless_origin(o: &Origin, credentials: &str) -> String {
    format!(
        "[origin]\nendpoint = \"{}\"\nregion = \"us-east-1\"\nretry_base = \"5ms\"\nretry_max = \"50ms\"\n{credentials}",
        o.endpoint()
    )
}

/// Nothing on the machine that the chain could find by accident: no shared
/// files, no instance metadata (each case adds its own).
fn isolated(dir: &Path) -> Vec<(String, String)> {
    vec![
        (
            "AWS_CONFIG_FILE".into(),
            dir.join("no-config").display().to_string(),
        ),
        (
            "AWS_SHARED_CREDENTIALS_FILE".into(),
            dir.join("no-credentials").display().to_string(),
        ),
        ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
        ("AWS_ACCESS_KEY_ID".into(), String::new()),
        ("AWS_SECRET_ACCESS_KEY".into(), String::new()),
    ]
}

fn with(mut base: Vec<(String, String)>, more: &[(&str, String)]) -> Vec<(String, String)> {
    for (k, v) in more {
        base.retain(|(b, _)| b != k);
        base.push((k.to_string(), v.clone()));
    }
    base
}

/// Mounts and reads `key`, and has a node serve it cold: both with credentials
/// only the chain can find.
async fn mount_and_node_read(
    o: &Origin,
    dir: &Path,
    env: Vec<(String, String)>,
    credentials: &str,
    key: &str,
) {
    let body = data(3 << 20, key.len() as u64);
    o.put(BUCKET, key, body.clone());
    let toml = keyless_origin(o, credentials);
    let (m_toml, m_env, k) = (toml.clone(), env.clone(), key.to_owned());
    let got = tokio::task::spawn_blocking(move || {
        let m = Mount::start_with_env(&m_toml, BUCKET, &[], &m_env);
        std::fs::read(m.path(&k)).unwrap()
    })
    .await
    .unwrap();
    assert!(got == body, "{key}: the mount read other bytes");

    let node_cfg = dir.join(format!("{}-node.toml", key.replace('/', "-")));
    std::fs::write(
        &node_cfg,
        node_section(&toml, "", "[cache]\nram_size = \"64MiB\""),
    )
    .unwrap();
    let node = NodeProcess::spawn_with_env(&node_cfg, &env);
    let (_, got) = node_s3_client(&node.addr, NODE_KEY, NODE_SECRET)
        .get_bytes(&GetObject::new(BUCKET, key))
        .await
        .unwrap_or_else(|e| panic!("{key}: the node's cold read: {e}"));
    assert!(got == body, "{key}: the node served other bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_metadata_v2() {
    let o = origin().await;
    let mock = AwsMock::start(&o, Duration::from_secs(3600)).await;
    let dir = tempfile::tempdir().unwrap();
    let env = with(
        isolated(dir.path()),
        &[
            ("AWS_EC2_METADATA_DISABLED", "false".into()),
            ("AWS_EC2_METADATA_SERVICE_ENDPOINT", mock.url()),
        ],
    );
    mount_and_node_read(&o, dir.path(), env, "", "imds/obj").await;
    assert!(mock.hits("imds-token") >= 2, "a session token first");
    assert!(mock.hits("imds-creds") >= 2, "then the role's credentials");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_credentials_as_ecs_and_eks_pod_identity_give_them() {
    let o = origin().await;
    let mock = AwsMock::start(&o, Duration::from_secs(3600)).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("pod-identity-token");
    std::fs::write(&token, CONTAINER_TOKEN).unwrap();
    let env = with(
        isolated(dir.path()),
        &[
            (
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                format!("{}/container-credentials", mock.url()),
            ),
            (
                "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                token.display().to_string(),
            ),
        ],
    );
    mount_and_node_read(&o, dir.path(), env, "", "ecs/obj").await;
    assert!(mock.hits("container") >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_identity_through_sts_as_eks_irsa_gives_it() {
    let o = origin().await;
    let mock = AwsMock::start(&o, Duration::from_secs(3600)).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("irsa-token");
    std::fs::write(&token, "eyJhbGciOi.service-account-token").unwrap();
    mock.expect_web_identity_token("eyJhbGciOi.service-account-token");
    let env = with(
        isolated(dir.path()),
        &[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", token.display().to_string()),
            ("AWS_ROLE_ARN", ROLE_ARN.into()),
            ("AWS_ROLE_SESSION_NAME", "shoal-test".into()),
            ("AWS_ENDPOINT_URL_STS", mock.url()),
        ],
    );
    mount_and_node_read(&o, dir.path(), env, "", "irsa/obj").await;
    assert!(mock.hits("sts-web-identity") >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_profile_assumes_the_role_with_its_source_profile() {
    let o = origin().await;
    let mock = AwsMock::start(&o, Duration::from_secs(3600)).await;
    let dir = tempfile::tempdir().unwrap();
    // The source profile's own keys are good for STS only: the origin never
    // accepts them.
    mock.expect_assume_role_signed_by("AKIASOURCEPROFILE01");
    let config = dir.path().join("config");
    std::fs::write(
        &config,
        format!(
            "[profile reader]\nrole_arn = {ROLE_ARN}\nsource_profile = base\nregion = us-east-1\n\n\
             [profile base]\naws_access_key_id = AKIASOURCEPROFILE01\naws_secret_access_key = source-secret\n"
        ),
    )
    .unwrap();
    let env = with(
        isolated(dir.path()),
        &[
            ("AWS_CONFIG_FILE", config.display().to_string()),
            ("AWS_ENDPOINT_URL_STS", mock.url()),
        ],
    );
    mount_and_node_read(
        &o,
        dir.path(),
        env,
        "[origin.credentials]\nprofile = \"reader\"\n",
        "role/obj",
    )
    .await;
    assert!(mock.hits("sts-assume-role") >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credential_process_in_the_default_profile() {
    let o = origin().await;
    let mock = AwsMock::start(&o, Duration::from_secs(3600)).await;
    let dir = tempfile::tempdir().unwrap();
    let env = process_profile(dir.path(), &mock);
    mount_and_node_read(&o, dir.path(), env, "", "process/obj").await;
    assert!(mock.hits("process") >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_go_on_across_credential_expiry_and_an_early_revocation() {
    let o = origin().await;
    // Four-second credentials: refreshed at half their life.
    let lifetime = Duration::from_secs(4);
    let mock = AwsMock::start(&o, lifetime).await;
    let dir = tempfile::tempdir().unwrap();
    let env = process_profile(dir.path(), &mock);
    // Enough small objects that every read is a first read (the mount's RAM
    // tier and the page cache would answer a second one without the origin).
    let files = 30_000;
    for i in 0..files {
        o.put(BUCKET, &format!("many/{i:05}"), data(4 << 10, i));
    }
    let metrics = free_addr();
    let toml = keyless_origin(&o, "");
    let policy = o.policy.clone();
    let (addr, m_env) = (metrics.clone(), env.clone());
    let (m, reads, took) = tokio::task::spawn_blocking(move || {
        let m = Mount::start_with_env(&toml, BUCKET, &["--metrics-addr", &addr], &m_env);
        let t0 = Instant::now();
        let mut reads = 0u64;
        let mut revoked = false;
        // Cold reads without pause for more than two lifetimes.
        while t0.elapsed() < lifetime * 5 / 2 {
            assert!(
                reads < files,
                "ran out of fresh objects after {:?}",
                t0.elapsed()
            );
            let i = reads;
            let got = std::fs::read(m.path(&format!("many/{i:05}")))
                .unwrap_or_else(|e| panic!("read {reads} failed after {:?}: {e}", t0.elapsed()));
            assert!(got == data(4 << 10, i), "read {reads}: other bytes");
            reads += 1;
            if !revoked && t0.elapsed() > lifetime / 4 {
                // The origin ends every session early: the next request is told
                // its token expired, refreshes, and is sent again.
                policy.expire_sessions();
                revoked = true;
            }
        }
        (m, reads, t0.elapsed())
    })
    .await
    .unwrap();
    let text = scrape(&metrics).await;
    tokio::task::spawn_blocking(move || drop(m)).await.unwrap();
    let fetches = metric(&text, "shoal_mount_credential_fetches_total");
    let forced = metric(&text, "shoal_mount_expired_token_retries_total");
    println!(
        "{reads} reads over {took:?} with {lifetime:?} credentials: {fetches} fetches \
         ({forced} forced by an expired token), {} issued",
        mock.issued().len()
    );
    assert!(
        fetches >= 3.0,
        "the first credentials and at least two refreshes: {fetches}"
    );
    assert!(
        forced >= 1.0,
        "the early revocation forced a refresh: {forced}"
    );
    // Refreshed ahead of expiry: a set issued while the one before it was still
    // valid. The revocation forces one such; refreshing only after the origin
    // refused an expired token would give no other.
    let issued = mock.issued();
    let ahead = issued
        .windows(2)
        .filter(|w| w[1].expires - lifetime < w[0].expires)
        .count();
    assert!(
        ahead >= 2,
        "credentials refreshed before they expired: {ahead} of {} issued",
        issued.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credentials_anywhere_fails_fast_naming_what_was_tried() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    // Instance metadata that refuses connections, STS that is not there.
    let env = with(
        isolated(dir.path()),
        &[
            ("AWS_EC2_METADATA_DISABLED", "false".into()),
            (
                "AWS_EC2_METADATA_SERVICE_ENDPOINT",
                "http://127.0.0.1:9".into(),
            ),
        ],
    );
    let t0 = Instant::now();
    let out = failed_start(&o, dir.path(), env).await;
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    for tried in [
        "environment",
        "shared config",
        "web identity",
        "container",
        "EC2 instance metadata",
    ] {
        assert!(err.contains(tried), "the error names {tried:?}: {err}");
    }
    assert!(took < Duration::from_secs(20), "gave up after {took:?}");
    println!("no credentials: failed in {took:?}: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sts_refusing_the_web_identity_fails_the_start_saying_so() {
    let o = origin().await;
    let mock = AwsMock::start(&o, Duration::from_secs(3600)).await;
    mock.expect_web_identity_token("the-token-sts-wants");
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "a-stale-token").unwrap();
    let env = with(
        isolated(dir.path()),
        &[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", token.display().to_string()),
            ("AWS_ROLE_ARN", ROLE_ARN.into()),
            ("AWS_ENDPOINT_URL_STS", mock.url()),
        ],
    );
    let t0 = Instant::now();
    let out = failed_start(&o, dir.path(), env).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("web identity token failed") && err.contains("InvalidIdentityToken"),
        "the error says STS refused the web identity: {err}"
    );
    assert!(t0.elapsed() < Duration::from_secs(20));
    assert!(mock.hits("sts-web-identity") >= 1);
}

/// An environment whose default profile (in a config file under `dir`) gets its
/// credentials from `mock`'s `credential_process` endpoint.
fn process_profile(dir: &Path, mock: &AwsMock) -> Vec<(String, String)> {
    let config = dir.join("config");
    let profile = format!(
        "[default]\ncredential_process = curl -sf {}/process\n",
        mock.url()
    );
    std::fs::write(&config, profile).unwrap();
    with(
        isolated(dir),
        &[("AWS_CONFIG_FILE", config.display().to_string())],
    )
}

/// `shoal-mount` started in the foreground with a keyless config under `dir` and
/// the environment `env`, run to its end: what it printed and how it exited.
async fn failed_start(
    o: &Origin,
    dir: &std::path::Path,
    env: Vec<(String, String)>,
) -> std::process::Output {
    let cfg = dir.join("mount.toml");
    std::fs::write(&cfg, keyless_origin(o, "")).unwrap();
    let mnt = dir.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(MOUNT)
            .arg("--config")
            .arg(&cfg)
            .arg("--foreground")
            .arg(BUCKET)
            .arg(&mnt)
            .envs(env)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}
