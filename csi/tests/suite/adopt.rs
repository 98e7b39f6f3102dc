//! A mount outlives its plugin and its keeper, and what its successors serve is
//! its own: a keeper the plugin starts after a server took over serves every
//! name and open file its own bytes; a plugin killed between starting a mount
//! and writing its record finds it at its restart, files and all.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;

const FILES: usize = 9;
const SIZE: usize = 300_000;

fn body(i: usize) -> bytes::Bytes {
    data(SIZE, 600 + i as u64)
}

fn status(control: &Path) -> serde_json::Value {
    serde_json::from_str(&shoal_mount::keeper::ask(control, "status").unwrap()).unwrap()
}

/// The control socket of the one volume in `state`.
fn control_of(state: &Path) -> PathBuf {
    std::fs::read_dir(state.join("volumes"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("control.sock"))
        .next()
        .expect("a published volume")
}

/// Waits for `pid` to be gone (a zombie of another parent counts as gone).
fn wait_gone(pid: u32) {
    wait_until("the process is gone", Duration::from_secs(10), || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z "))
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keeper_replaced_after_a_takeover_serves_every_name_and_handle_its_own_bytes() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    for i in 0..FILES {
        o.put(BUCKET, &format!("a/f{i}"), body(i));
    }
    let cfg = dir.path().join("mount.toml");
    // Names stay in the kernel's cache for the whole test.
    std::fs::write(
        &cfg,
        mount_toml(&o, &[], "[mount]\nmetadata_ttl = \"10m\"\n"),
    )
    .unwrap();
    let plugin = Plugin::start(dir.path(), &cfg, &[], &[]);
    let (_, mut client) = plugin.clients().await;
    let target = pod_volume_dir(dir.path(), "pod-a", "pv-a");
    client
        .node_publish_volume(publish(
            "vol-a",
            &target,
            &[("bucket", BUCKET), ("prefix", "a")],
            &[],
        ))
        .await
        .unwrap();
    let control = control_of(&plugin.state);
    let t = target.clone();
    tokio::task::spawn_blocking(move || assert_eq!(std::fs::read(t.join("f0")).unwrap(), body(0)))
        .await
        .unwrap();

    // The server killed: its successor takes the mount over (and compacts the
    // journal it was handed).
    let server = status(&control)["server"].as_u64().unwrap() as u32;
    signal(server, "-KILL");
    wait_until("a new server took over", Duration::from_secs(20), || {
        let s = status(&control);
        s["restarts"] == 1 && s["server"].is_u64()
    });
    // New names and handles, known only to what the successor wrote.
    let t = target.clone();
    let handles = tokio::task::spawn_blocking(move || {
        (1..5)
            .map(|i| std::fs::File::open(t.join(format!("f{i}"))).unwrap())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();

    // The keeper killed: the plugin starts another on its copy of the connection.
    let keeper = status(&control)["keeper"].as_u64().unwrap() as u32;
    signal(keeper, "-KILL");
    wait_gone(keeper);
    wait_until(
        "the plugin started another keeper",
        Duration::from_secs(30),
        || {
            shoal_mount::keeper::ask(&control, "status")
                .ok()
                .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
                .is_some_and(|s| {
                    s["keeper"].as_u64() != Some(keeper as u64) && s["server"].is_u64()
                })
        },
    );

    let t = target.clone();
    let wrong = tokio::task::spawn_blocking(move || {
        let mut wrong = Vec::new();
        // Names never seen before: fresh inode numbers, which must not be ones
        // the kernel holds for the names opened above.
        for i in 5..FILES {
            match std::fs::read(t.join(format!("f{i}"))) {
                Ok(b) if b == body(i) => {}
                other => wrong.push(format!("f{i} by name: {:?}", other.map(|b| b.len()))),
            }
        }
        for (k, h) in handles.iter().enumerate() {
            let i = k + 1;
            let mut buf = vec![0u8; SIZE];
            match h.read_exact_at(&mut buf, 0) {
                Ok(()) if buf == body(i) => {}
                Ok(()) => wrong.push(format!("f{i}'s handle read other bytes")),
                Err(e) => wrong.push(format!("f{i}'s handle: {e}")),
            }
        }
        for i in 0..FILES {
            match std::fs::read(t.join(format!("f{i}"))) {
                Ok(b) if b == body(i) => {}
                Ok(_) => wrong.push(format!("f{i} by name read other bytes")),
                Err(e) => wrong.push(format!("f{i} by name: {e}")),
            }
        }
        wrong
    })
    .await
    .unwrap();
    assert!(wrong.is_empty(), "{wrong:#?}\n{}", plugin.log_text());
    client
        .node_unpublish_volume(unpublish("vol-a", &target))
        .await
        .unwrap();
    assert!(!is_mounted(&target));
}

/// A `shoal-mount` that, the first time it starts a mount, SIGKILLs the plugin
/// that ran it once the mount is live: before the plugin can write anything
/// more.
fn killing_mount_bin(dir: &Path) -> PathBuf {
    let script = dir.join("shoal-mount-then-kill");
    let marker = dir.join("killed-once");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             case \"$1\" in --version|--status|--restart|--unmount) exec {real} \"$@\";; esac\n\
             {real} \"$@\"; rc=$?\n\
             if [ $rc -eq 0 ] && [ -z \"$SHOAL_MOUNT_ADOPT_FDS\" ] && [ ! -e {marker} ]; then\n\
               touch {marker}; kill -KILL $PPID\n\
             fi\n\
             exit $rc\n",
            real = bin("shoal-mount").display(),
            marker = marker.display(),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_killed_between_launch_and_record_leaves_the_mount_serving_with_its_files() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    o.put(BUCKET, "k/f", body(0));
    let cfg = dir.path().join("mount.toml");
    std::fs::write(&cfg, mount_toml(&o, &[], "")).unwrap();
    let mount_bin = killing_mount_bin(dir.path());
    let mut plugin = Plugin::start(
        dir.path(),
        &cfg,
        &[&format!("--mount-bin={}", mount_bin.display())],
        &[],
    );
    let (_, mut client) = plugin.clients().await;
    let target = pod_volume_dir(dir.path(), "pod-k", "pv-k");
    let r = client
        .node_publish_volume(publish(
            "vol-k",
            &target,
            &[("bucket", BUCKET), ("prefix", "k")],
            &[],
        ))
        .await;
    assert!(r.is_err(), "the plugin died as it published: {r:?}");
    assert!(is_mounted(&target), "the mount came up");
    plugin.kill_and_restart();

    // The restarted plugin left the volume's files where the mount uses them.
    let control = control_of(&plugin.state);
    let vol = control.parent().unwrap().to_owned();
    assert!(vol.join("mount.toml").exists(), "its config stays");
    assert!(vol.join("volume.json").exists(), "its record is there");
    let t = target.clone();
    tokio::task::spawn_blocking(move || assert_eq!(std::fs::read(t.join("f")).unwrap(), body(0)))
        .await
        .unwrap();
    // A new server reads the config again: the mount still has one.
    let server = status(&control)["server"].as_u64().unwrap() as u32;
    signal(server, "-KILL");
    wait_until("a new server took over", Duration::from_secs(20), || {
        let s = status(&control);
        s["restarts"] == 1 && s["server"].is_u64()
    });
    let t = target.clone();
    tokio::task::spawn_blocking(move || assert_eq!(std::fs::read(t.join("f")).unwrap(), body(0)))
        .await
        .unwrap();
    // And the restarted plugin knows the volume: it unpublishes it.
    let (_, mut client) = plugin.clients().await;
    client
        .node_unpublish_volume(unpublish("vol-k", &target))
        .await
        .unwrap();
    assert!(!is_mounted(&target) && !target.exists());
}
