//! Mounts follow the driver's version: a plugin restarted with a newer
//! `shoal-mount` at `--mount-bin` (what a DaemonSet rollout does) hands every
//! mount it keeps over to it through the mount's keeper, one at a time, while
//! pods read; with the same binary it hands nothing over, and with
//! `--upgrade-mounts=false` it leaves them as they are.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;

/// A pod reading its volume's files over and over, byte-exact or counted.
struct Reader {
    reads: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl Reader {
    fn start(target: PathBuf, files: Vec<(String, Vec<u8>)>) -> Reader {
        let (reads, failed, stop) = Default::default();
        let (r, f, s): (Arc<AtomicU64>, Arc<AtomicU64>, Arc<AtomicBool>) =
            (Arc::clone(&reads), Arc::clone(&failed), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            let mut why = Vec::new();
            while !s.load(Relaxed) {
                for (name, body) in &files {
                    match std::fs::read(target.join(name)) {
                        Ok(b) if &b == body => {}
                        Ok(b) => {
                            f.fetch_add(1, Relaxed);
                            why.push(format!("{name}: {} bytes, not its own", b.len()));
                        }
                        Err(e) => {
                            f.fetch_add(1, Relaxed);
                            why.push(format!("{name}: {e}"));
                        }
                    }
                    r.fetch_add(1, Relaxed);
                }
            }
            why
        });
        Reader {
            reads,
            failed,
            stop,
            thread: Some(thread),
        }
    }

    fn reads(&self) -> u64 {
        self.reads.load(Relaxed)
    }

    /// Waits for `n` more reads.
    fn read_on(&self, n: u64) {
        let want = self.reads() + n;
        wait_until("the reader reads on", Duration::from_secs(30), || {
            self.reads() >= want
        });
    }

    fn stop(mut self) -> (u64, u64, Vec<String>) {
        self.stop.store(true, Relaxed);
        let why = self.thread.take().unwrap().join().unwrap();
        (self.reads(), self.failed.load(Relaxed), why)
    }
}

/// Installs `from` at `to` as the DaemonSet's init container does (`install`:
/// a new file renamed over the old one), with `extra` bytes after it: a build
/// whose bytes, and so whose digest, differ.
fn install(from: &Path, to: &Path, extra: &[u8]) {
    let mut bytes = std::fs::read(from).unwrap();
    bytes.extend_from_slice(extra);
    let tmp = to.with_extension("new");
    std::fs::write(&tmp, bytes).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&tmp, to).unwrap();
}

/// Each mount's keeper status, by its control socket.
fn statuses(state: &Path) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(state.join("volumes")).unwrap().flatten() {
        let control = e.path().join("control.sock");
        if let Ok(a) = shoal_mount::keeper::ask(&control, "status") {
            out.push(serde_json::from_str(&a).unwrap());
        }
    }
    out
}

/// The handovers the plugin's log tells of: (mount, from, to, ms).
fn handovers(log: &str) -> Vec<(String, String, String, u64)> {
    log.lines()
        .filter_map(|l| {
            let rest = &l[l.find("handed ")? + 7..];
            let (mount, rest) = rest.split_once(" over from shoal-mount ")?;
            let (from, rest) = rest.split_once(" to ")?;
            let (to, rest) = rest.split_once(" in ")?;
            let ms = rest.strip_suffix(" ms")?.parse().ok()?;
            Some((mount.into(), from.into(), to.into(), ms))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_a_newer_shoal_mount_hands_every_mount_over_under_its_readers() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let n = NodeProcess::start(dir.path(), "n0", &node_toml(&o, "", ""));
    let cfg = dir.path().join("mount.toml");
    std::fs::write(&cfg, zoned_mount_toml(&o, &[(&n, ZONE)], "")).unwrap();
    // The driver's shoal-mount at a path of its own, as the DaemonSet installs it.
    let bin = dir.path().join("bin/shoal-mount");
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    install(&bin_path(), &bin, b"");
    let old = shoal_mount::build::digest_of(&bin).unwrap();
    let metrics = free_addr();
    let mut plugin = Plugin::start(
        dir.path(),
        &cfg,
        &[
            &format!("--mount-bin={}", bin.display()),
            &format!("--metrics-addr={metrics}"),
        ],
        &[],
    );
    let (_, mut node) = plugin.clients().await;
    // Three staged volumes (three shares), each published for a pod that reads it.
    let mut readers = Vec::new();
    let mut published = Vec::new();
    for v in 0..3 {
        let prefix = format!("u{v}");
        let files: Vec<(String, Vec<u8>)> = (0..3)
            .map(|i| {
                (
                    format!("f{i}.bin"),
                    data(300_000 + i * 1000, 40 + v * 3 + i as u64).to_vec(),
                )
            })
            .collect();
        for (name, body) in &files {
            o.put(BUCKET, &format!("{prefix}/{name}"), body.clone());
        }
        let volume = format!("vol-u{v}");
        let attrs = [("bucket", BUCKET), ("prefix", prefix.as_str())];
        let staging = staging_dir(dir.path(), &format!("pv-u{v}"));
        node.node_stage_volume(stage(&volume, &staging, &attrs, &[]))
            .await
            .unwrap();
        let target = pod_volume_dir(dir.path(), &format!("pod-u{v}"), &format!("pv-u{v}"));
        node.node_publish_volume(publish_staged(&volume, &staging, &target, &attrs, &[]))
            .await
            .unwrap();
        readers.push(Reader::start(target.clone(), files));
        published.push((volume, staging, target));
    }
    assert_eq!(statuses(&plugin.state).len(), 3, "three shares");
    for s in statuses(&plugin.state) {
        assert_eq!(s["server_build"].as_str(), Some(old.as_str()), "{s}");
    }
    for r in &readers {
        r.read_on(6);
    }

    // The rollout: a newer shoal-mount installed, the plugin restarted.
    install(&bin_path(), &bin, b"\0a newer build");
    let new = shoal_mount::build::digest_of(&bin).unwrap();
    assert_ne!(old, new);
    let servers: Vec<u64> = statuses(&plugin.state)
        .iter()
        .map(|s| s["server"].as_u64().unwrap())
        .collect();
    plugin.kill_and_restart();
    wait_until(
        "every mount is handed over",
        Duration::from_secs(120),
        || checks(&plugin.log_text()) == 2,
    );
    for r in &readers {
        r.read_on(6);
    }
    let done = handovers(&plugin.log_text());
    for (mount, from, to, ms) in &done {
        eprintln!("handover of {mount}: {from} -> {to} in {ms} ms");
        assert!(from.ends_with(&old) && to.ends_with(&new), "{from} -> {to}");
    }
    assert_eq!(done.len(), 3, "{done:?}");
    let after = statuses(&plugin.state);
    for s in &after {
        assert_eq!(s["server_build"].as_str(), Some(new.as_str()), "{s}");
        assert!(
            !servers.contains(&s["server"].as_u64().unwrap()),
            "a new server: {s}"
        );
        assert_eq!(s["handovers"], 1, "{s}");
    }
    // Each mount's version, as kubelet's stats and the metrics say it.
    for (volume, _, target) in &published {
        let stats = node
            .node_get_volume_stats(proto_stats(volume, target))
            .await
            .unwrap()
            .into_inner();
        let c = stats.volume_condition.unwrap();
        assert!(!c.abnormal, "{}", c.message);
        assert!(
            c.message.ends_with(&format!("+{new} (the driver's)")),
            "{}",
            c.message
        );
    }
    let page = scrape(&metrics).await;
    assert_eq!(
        metric(&page, "shoal_csi_handovers_total{result=\"done\"}"),
        3.0
    );
    assert_eq!(metric(&page, "shoal_csi_mounts_behind"), 0.0);
    let versions = page
        .lines()
        .filter(|l| l.starts_with("shoal_csi_mount_version{") && l.contains(&new))
        .count();
    assert_eq!(versions, 3, "{page}");

    // The same binary again: nothing to hand over.
    plugin.kill_and_restart();
    let (_, mut node) = plugin.clients().await;
    wait_until(
        "the mounts are checked again",
        Duration::from_secs(60),
        || checks(&plugin.log_text()) == 3,
    );
    assert_eq!(handovers(&plugin.log_text()).len(), 3, "no more handovers");
    let page = scrape(&metrics).await;
    assert_eq!(
        metric(&page, "shoal_csi_handovers_total{result=\"done\"}"),
        0.0
    );
    assert_eq!(metric(&page, "shoal_csi_mounts_behind"), 0.0);

    let mut total = 0;
    for r in readers {
        let (reads, failed, why) = r.stop();
        assert_eq!(failed, 0, "{why:?}");
        total += reads;
    }
    eprintln!("{total} reads by 3 pods across the handovers, 0 failed");
    for (volume, staging, target) in &published {
        node.node_unpublish_volume(unpublish(volume, target))
            .await
            .unwrap();
        node.node_unstage_volume(unstage(volume, staging))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_upgrade_mounts_off_a_mount_keeps_its_shoal_mount() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("mount.toml");
    std::fs::write(&cfg, mount_toml(&o, &[], "")).unwrap();
    let bin = dir.path().join("bin/shoal-mount");
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    install(&bin_path(), &bin, b"");
    let old = shoal_mount::build::digest_of(&bin).unwrap();
    let mount_bin = format!("--mount-bin={}", bin.display());
    let mut plugin = Plugin::start(
        dir.path(),
        &cfg,
        &[&mount_bin, "--upgrade-mounts=false"],
        &[],
    );
    let (_, mut node) = plugin.clients().await;
    let body = data(100_000, 50);
    o.put(BUCKET, "k/f.bin", body.clone());
    let target = pod_volume_dir(dir.path(), "pod-k", "pv-k");
    let attrs = [("bucket", BUCKET), ("prefix", "k")];
    node.node_publish_volume(publish("vol-k", &target, &attrs, &[]))
        .await
        .unwrap();
    install(&bin_path(), &bin, b"\0a newer build");
    plugin.kill_and_restart();
    let (_, mut node) = plugin.clients().await;
    wait_until("the mounts are checked", Duration::from_secs(60), || {
        checks(&plugin.log_text()) == 2
    });
    let log = plugin.log_text();
    assert!(
        log.contains("0 handed over, 0 failed, 1 left as they are"),
        "{log}"
    );
    let stats = node
        .node_get_volume_stats(proto_stats("vol-k", &target))
        .await
        .unwrap()
        .into_inner();
    let message = stats.volume_condition.unwrap().message;
    // It says it is behind, and stays so.
    assert!(
        message.contains(&format!("+{old} (the driver's is ")),
        "{message}"
    );
    let s = &statuses(&plugin.state)[0];
    assert_eq!(s["server_build"].as_str(), Some(old.as_str()));
    assert_eq!(s["handovers"], 0);
    assert!(handovers(&plugin.log_text()).is_empty());
    assert_eq!(std::fs::read(target.join("f.bin")).unwrap(), body);
    node.node_unpublish_volume(unpublish("vol-k", &target))
        .await
        .unwrap();
}

/// How many passes over the mounts the plugin's log tells of.
fn checks(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains(" mounts against shoal-mount "))
        .count()
}

fn bin_path() -> PathBuf {
    bin("shoal-mount")
}

fn proto_stats(volume: &str, target: &Path) -> shoal_csi::proto::NodeGetVolumeStatsRequest {
    shoal_csi::proto::NodeGetVolumeStatsRequest {
        volume_id: volume.into(),
        volume_path: target.display().to_string(),
        ..Default::default()
    }
}
