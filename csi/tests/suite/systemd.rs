//! `--launcher systemd` with secrets: a volume's mount is started as a unit
//! (by a stand-in for `systemd-run`, which runs the unit's command as systemd
//! would: in systemd's environment, not the plugin's), and its secrets reach it
//! through a file of mode 0600, on no command line (`ps`) and in no property
//! of the unit (`systemctl show`).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::common::*;

/// `systemd-run` as far as the plugin uses it: records its arguments, then
/// starts the unit's command in an environment of systemd's (PATH, and what
/// `--setenv`/`-E` give it), in a session of its own, and returns once the
/// mount on its last argument is up (`Type=notify`).
const SYSTEMD_RUN: &str = r#"#!/bin/bash
rec="$FAKE_SYSTEMD_DIR"
printf '%s\0' "$@" > "$rec/argv.$$"
envs=(PATH=/usr/sbin:/usr/bin:/sbin:/bin)
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    --setenv=*) envs+=("${1#--setenv=}") ;;
    -E|--setenv) shift; envs+=("$1") ;;
  esac
  shift
done
shift
target="${!#}"
env -i "${envs[@]}" setsid "$@" > "$rec/unit.$$.log" 2>&1 < /dev/null &
for _ in $(seq 200); do
  mountpoint -q "$target" && exit 0
  sleep 0.1
done
echo "the unit's mount did not come up" >&2
cat "$rec/unit.$$.log" >&2
exit 1
"#;

/// Every process's command line, as `ps` shows them to any user.
fn command_lines() -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .collect()
}

/// The arguments of each recorded `systemd-run` call.
fn recorded_calls(dir: &Path) -> Vec<Vec<String>> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("argv."))
        .map(|e| {
            String::from_utf8_lossy(&std::fs::read(e.path()).unwrap())
                .split('\0')
                .filter(|a| !a.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_units_secrets_come_from_a_private_file_not_its_command_line() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    // Secrets of this run alone, so that no other process can have them.
    let cluster_secret = format!("cluster-secret-{stamp}");
    let aws_secret = format!("aws-secret-{stamp}");
    let node_cfg = node_toml(&o, "", "").replace(NODE_SECRET, &cluster_secret);
    let n = NodeProcess::start(dir.path(), "n0", &node_cfg);
    // The mount signs its requests to the node with the secret in the
    // variable the config names, as the DaemonSet's config does.
    let inline = format!("secret_access_key = \"{NODE_SECRET}\"\n");
    let mount_cfg = zoned_mount_toml(&o, &[(&n, ZONE)], "");
    assert_eq!(mount_cfg.matches(&inline).count(), 1, "{mount_cfg}");
    let mount_cfg = mount_cfg.replace(
        &inline,
        "secret_access_key_env = \"SHOAL_CLUSTER_SECRET\"\n",
    );
    let cfg = dir.path().join("mount.toml");
    std::fs::write(&cfg, mount_cfg).unwrap();
    let body = data(300_000, 9);
    o.put(BUCKET, "u/f.bin", body.clone());

    let fake = dir.path().join("fake-systemd");
    std::fs::create_dir(&fake).unwrap();
    let run = fake.join("systemd-run");
    std::fs::write(&run, SYSTEMD_RUN).unwrap();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", fake.display(), std::env::var("PATH").unwrap());
    let env: Vec<(String, String)> = [
        ("PATH", path.as_str()),
        ("FAKE_SYSTEMD_DIR", fake.to_str().unwrap()),
        ("SHOAL_CLUSTER_SECRET", cluster_secret.as_str()),
        ("AWS_SECRET_ACCESS_KEY", aws_secret.as_str()),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let plugin = Plugin::start(dir.path(), &cfg, &["--launcher=systemd"], &env);
    let (_, mut node) = plugin.clients().await;
    let target = pod_volume_dir(dir.path(), "p1", "pv1");
    node.node_publish_volume(publish(
        "vol-u",
        &target,
        &[
            ("bucket", BUCKET),
            ("prefix", "u"),
            ("memoryLimit", "256MiB"),
        ],
        &[],
    ))
    .await
    .unwrap();
    assert_eq!(std::fs::read(target.join("f.bin")).unwrap(), body);
    // The node admitted the mount's reads: signed with the secret it was given.
    let admitted = metric(
        &scrape(&n.addr).await,
        &format!("shoal_node_key_requests_total{{key=\"{NODE_KEY}\"}}"),
    );
    assert!(admitted > 0.0, "the node admitted the mount's requests");

    let calls = recorded_calls(&fake);
    assert_eq!(calls.len(), 1, "one unit started: {calls:?}");
    // `systemctl list-units` says which volume the unit serves.
    let unit = calls[0].iter().find_map(|a| a.strip_prefix("--unit="));
    assert!(
        unit.is_some_and(|u| u.starts_with("shoal-csi-vol-u-") && u.ends_with(".service")),
        "the unit's name says its volume: {unit:?}"
    );
    // The volume's memory limit: the unit's, and what the mount fits itself to;
    // a unit that reads no file past its mode, and no device but FUSE's.
    for want in [
        "--property=MemoryMax=268435456",
        "--memory-limit=268435456",
        "--property=CapabilityBoundingSet=CAP_SYS_ADMIN CAP_SYS_RESOURCE",
        "--property=DevicePolicy=closed",
        "--property=DeviceAllow=/dev/fuse rw",
    ] {
        assert!(
            calls[0].iter().any(|a| a == want),
            "{want} in {:?}",
            calls[0]
        );
    }
    for arg in &calls[0] {
        for secret in [&cluster_secret, &aws_secret] {
            assert!(
                !arg.contains(secret.as_str()),
                "a secret in systemd-run's argument {arg:?}"
            );
        }
        assert!(
            !arg.starts_with("--setenv") && arg != "-E" && !arg.contains("Environment="),
            "no environment as a property of the unit: {arg:?}"
        );
    }
    for line in command_lines() {
        for secret in [&cluster_secret, &aws_secret] {
            assert!(
                !line.contains(secret.as_str()),
                "a secret on a command line: {line}"
            );
        }
    }
    // It came through the volume's env file, its owner's alone.
    let files: Vec<_> = std::fs::read_dir(plugin.state.join("volumes"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("unit.env"))
        .filter(|p| p.exists())
        .collect();
    assert_eq!(files.len(), 1);
    let mode = std::fs::metadata(&files[0]).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let text = std::fs::read_to_string(&files[0]).unwrap();
    assert!(text.contains(&format!("SHOAL_CLUSTER_SECRET={cluster_secret}\n")));

    node.node_unpublish_volume(unpublish("vol-u", &target))
        .await
        .unwrap();
    assert!(!is_mounted(&target));
}
