//! The plugin as kubelet meets it: a `shoal-csi` process on a socket in a fresh
//! state directory, clients of its Identity and Node services, and the requests
//! kubelet builds.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use shoal_csi::proto::identity_client::IdentityClient;
use shoal_csi::proto::node_client::NodeClient;
use shoal_csi::proto::{self, volume_capability};
use tonic::transport::{Channel, Endpoint};

pub use shoal_testkit::*;

pub const CSI: &str = env!("CARGO_BIN_EXE_shoal-csi");

/// The zone the plugin is given (`--zone`) unless a test gives it another, and
/// the zone the tests' nodes are in: their reads go through the nodes.
pub const ZONE: &str = "zone-a";

/// A mount config as [`mount_toml`]'s, each node listed with a zone
/// (`{ id = "...", zone = "..." }`): `nodes` pairs a node with its zone.
pub fn zoned_mount_toml(o: &Origin, nodes: &[(&NodeProcess, &str)], extra: &str) -> String {
    let refs: Vec<&NodeProcess> = nodes.iter().map(|(n, _)| *n).collect();
    let plain = mount_toml(o, &refs, extra);
    let specs: Vec<String> = nodes
        .iter()
        .map(|(n, z)| format!("{{ id = \"{}\", zone = \"{z}\" }}", n.addr))
        .collect();
    let zoned = format!("nodes = [{}]", specs.join(", "));
    let line = plain
        .lines()
        .find(|l| l.starts_with("nodes = ["))
        .expect("a node list");
    plain.replacen(line, &zoned, 1)
}

/// A config with no keys and no cluster: the chain, straight to the origin.
pub fn chain_config(dir: &Path, o: &Origin) -> PathBuf {
    let cfg = dir.join("mount.toml");
    std::fs::write(
        &cfg,
        format!(
            "[origin]\nendpoint = \"{}\"\nregion = \"us-east-1\"\nretry_base = \"5ms\"\nretry_max = \"50ms\"\n",
            o.endpoint()
        ),
    )
    .unwrap();
    cfg
}

/// A running plugin; SIGKILLed (its whole process group) when dropped. Mounts it
/// published are left to the test to unpublish.
pub struct Plugin {
    pub child: Child,
    pub socket: PathBuf,
    pub state: PathBuf,
    pub log: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl Plugin {
    /// `shoal-csi` on a socket under `dir`, state in `dir/state`, `config` as the
    /// default mount config, in [`ZONE`] unless `extra` names a `--zone`, with
    /// `extra` arguments and `env`.
    pub fn start(dir: &Path, config: &Path, extra: &[&str], env: &[(String, String)]) -> Plugin {
        let socket = dir.join("plugin/csi.sock");
        let state = dir.join("state");
        let mut args = vec![
            format!("--endpoint=unix://{}", socket.display()),
            "--node-id=node-1".to_owned(),
            format!("--state-dir={}", state.display()),
            format!("--default-config={}", config.display()),
        ];
        // A test that names the zone (or where it comes from) says it alone.
        if !extra.iter().any(|a| a.starts_with("--zone")) {
            args.push(format!("--zone={ZONE}"));
        }
        if !extra.iter().any(|a| a.starts_with("--mount-bin")) {
            args.push(format!("--mount-bin={}", bin("shoal-mount").display()));
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut p = Plugin {
            child: Command::new("true").spawn().unwrap(),
            socket,
            state,
            log: dir.join("plugin.log"),
            args,
            env: env.to_vec(),
        };
        p.launch();
        p
    }

    fn launch(&mut self) {
        use std::os::unix::process::CommandExt;
        let _ = self.child.wait();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        // A process group of its own: a restart of the plugin is a SIGKILL of
        // its whole group.
        self.child = Command::new(CSI)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("start shoal-csi");
        wait_until("shoal-csi listens", Duration::from_secs(20), || {
            if let Some(s) = self.child.try_wait().unwrap() {
                panic!("shoal-csi exited ({s}): {}", self.log_text());
            }
            std::os::unix::net::UnixStream::connect(&self.socket).is_ok()
        });
    }

    /// SIGKILLs the plugin's whole process group, as a container restart does to
    /// its processes, then starts it again on the same state.
    pub fn kill_and_restart(&mut self) {
        self.kill();
        self.launch();
    }

    pub fn kill(&mut self) {
        // SAFETY: a signal to the group we made.
        unsafe { libc::killpg(self.child.id() as i32, libc::SIGKILL) };
        let _ = self.child.wait();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn clients(&self) -> (IdentityClient<Channel>, NodeClient<Channel>) {
        let ch = connect(&self.socket).await;
        (IdentityClient::new(ch.clone()), NodeClient::new(ch))
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A gRPC channel over the Unix socket `path`.
pub async fn connect(path: &Path) -> Channel {
    let path = path.to_owned();
    Endpoint::try_from("http://[::]:50051")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_: http::Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(path).await?,
                ))
            }
        }))
        .await
        .expect("connect to the plugin")
}

/// The capability kubelet sends for a PersistentVolume with `mountOptions`.
pub fn mount_capability(flags: &[&str]) -> proto::VolumeCapability {
    proto::VolumeCapability {
        access_mode: Some(volume_capability::AccessMode {
            mode: volume_capability::access_mode::Mode::MultiNodeReaderOnly as i32,
        }),
        access_type: Some(volume_capability::AccessType::Mount(
            volume_capability::MountVolume {
                fs_type: String::new(),
                mount_flags: flags.iter().map(|s| s.to_string()).collect(),
                volume_mount_group: String::new(),
            },
        )),
    }
}

/// A publish of `volume_id` at `target` with `attributes` and mount `flags`.
pub fn publish(
    volume_id: &str,
    target: &Path,
    attributes: &[(&str, &str)],
    flags: &[&str],
) -> proto::NodePublishVolumeRequest {
    proto::NodePublishVolumeRequest {
        volume_id: volume_id.into(),
        target_path: target.display().to_string(),
        volume_capability: Some(mount_capability(flags)),
        readonly: true,
        volume_context: attributes
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<HashMap<_, _>>(),
        ..Default::default()
    }
}

pub fn unpublish(volume_id: &str, target: &Path) -> proto::NodeUnpublishVolumeRequest {
    proto::NodeUnpublishVolumeRequest {
        volume_id: volume_id.into(),
        target_path: target.display().to_string(),
    }
}

/// The gRPC code of `r`'s error, and its message; panics on success.
pub fn refused<T: std::fmt::Debug>(r: Result<T, tonic::Status>) -> (tonic::Code, String) {
    match r {
        Ok(v) => panic!("expected a refusal, got {v:?}"),
        Err(s) => (s.code(), s.message().to_owned()),
    }
}

/// A kubelet pod directory's volume parent, made as kubelet makes it (the target
/// itself is the plugin's to make).
pub fn pod_volume_dir(root: &Path, pod: &str, pv: &str) -> PathBuf {
    let d = root.join(format!("pods/{pod}/volumes/kubernetes.io~csi/{pv}"));
    std::fs::create_dir_all(&d).unwrap();
    d.join("mount")
}

/// A stage of `volume_id` at `staging` with `attributes` and mount `flags`, as
/// kubelet sends it before the first publish of a volume on its node.
pub fn stage(
    volume_id: &str,
    staging: &Path,
    attributes: &[(&str, &str)],
    flags: &[&str],
) -> proto::NodeStageVolumeRequest {
    proto::NodeStageVolumeRequest {
        volume_id: volume_id.into(),
        staging_target_path: staging.display().to_string(),
        volume_capability: Some(mount_capability(flags)),
        volume_context: attributes
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<HashMap<_, _>>(),
        ..Default::default()
    }
}

/// A publish of a staged volume: [`publish`] with the staging path kubelet names.
pub fn publish_staged(
    volume_id: &str,
    staging: &Path,
    target: &Path,
    attributes: &[(&str, &str)],
    flags: &[&str],
) -> proto::NodePublishVolumeRequest {
    proto::NodePublishVolumeRequest {
        staging_target_path: staging.display().to_string(),
        ..publish(volume_id, target, attributes, flags)
    }
}

pub fn unstage(volume_id: &str, staging: &Path) -> proto::NodeUnstageVolumeRequest {
    proto::NodeUnstageVolumeRequest {
        volume_id: volume_id.into(),
        staging_target_path: staging.display().to_string(),
    }
}

/// kubelet's staging path of a volume (`.../globalmount`), made as kubelet makes it.
pub fn staging_dir(root: &Path, pv: &str) -> PathBuf {
    let d = root.join(format!(
        "plugins/kubernetes.io/csi/csi.shoal/{pv}/globalmount"
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}
