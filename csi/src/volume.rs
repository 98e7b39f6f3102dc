//! What a NodePublishVolume asks for, checked: the volume, its target, its
//! attributes (`bucket`, `prefix`, `config`, `authenticationSource`, `cache`,
//! `cacheSize`, `memoryLimit`; Kubernetes adds its own `csi.storage.k8s.io/*`) and its mount
//! options. Anything missing or wrong is an INVALID_ARGUMENT naming what, found
//! before anything on the node is touched.

use std::collections::HashMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::CsiError;
use crate::proto;

/// Kubelet's keys (pod info, service-account tokens, ephemeral).
const KUBELET_PREFIX: &str = "csi.storage.k8s.io/";
const TOKENS: &str = "csi.storage.k8s.io/serviceAccount.tokens";
const EPHEMERAL: &str = "csi.storage.k8s.io/ephemeral";
const ATTRIBUTES: &[&str] = &[
    "bucket",
    "prefix",
    "config",
    "authenticationSource",
    "cache",
    "cacheSize",
    "memoryLimit",
];

/// Whose credentials read the volume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Auth {
    /// The driver's own (its service account: IRSA, Pod Identity; or the config's).
    Driver,
    /// The pod's own service account, through its projected token.
    Pod {
        namespace: String,
        service_account: String,
        pod_uid: String,
    },
}

/// The parts of a publish or stage request a volume is checked from.
struct Request<'a> {
    volume_id: &'a str,
    /// `target_path` or `staging_target_path`, for the messages.
    path_name: &'a str,
    /// A stage: kubelet sends no pod there, so a pod-credentials volume names
    /// none yet.
    staging: bool,
    path: &'a str,
    capability: Option<&'a proto::VolumeCapability>,
    context: &'a HashMap<String, String>,
    secrets: &'a HashMap<String, String>,
}

/// A checked publish (or stage) request.
#[derive(Clone, Debug)]
pub struct VolumeSpec {
    pub volume_id: String,
    pub target: PathBuf,
    pub bucket: String,
    /// Empty or ending in `/`.
    pub prefix: String,
    /// The mount's config, in the driver's filesystem.
    pub config: PathBuf,
    /// `shoal-mount` options from the mount flags.
    pub args: Vec<String>,
    pub auth: Auth,
    /// The pod's web-identity token (for `Auth::Pod`): it rotates, so it is not
    /// part of what makes two publishes the same.
    pub token: Option<String>,
    /// A disk tier of this size, living and dying with the volume (`cache: emptyDir`).
    pub cache: Option<String>,
    /// `memoryLimit` as given: the mount's unit's `MemoryMax=` and what its
    /// caches are fitted to (none: a default from the host's memory).
    pub memory_limit: Option<String>,
    pub ephemeral: bool,
}

/// What must match for a publish to be the same one again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    pub volume_id: String,
    pub bucket: String,
    pub prefix: String,
    pub config: PathBuf,
    pub args: Vec<String>,
    pub auth: Auth,
    pub cache: Option<String>,
    /// Absent in the records of plugins before it: the same as not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<String>,
}

impl VolumeSpec {
    /// Checks `req`; `default_config` is the config a volume names none of.
    pub fn from_publish(
        req: &proto::NodePublishVolumeRequest,
        default_config: &std::path::Path,
    ) -> Result<VolumeSpec, CsiError> {
        Self::from_request(
            Request {
                volume_id: &req.volume_id,
                path_name: "target_path",
                staging: false,
                path: &req.target_path,
                capability: req.volume_capability.as_ref(),
                context: &req.volume_context,
                secrets: &req.secrets,
            },
            default_config,
        )
    }

    /// Checks a NodeStageVolume: the spec's target is the staging path.
    pub fn from_stage(
        req: &proto::NodeStageVolumeRequest,
        default_config: &std::path::Path,
    ) -> Result<VolumeSpec, CsiError> {
        Self::from_request(
            Request {
                volume_id: &req.volume_id,
                path_name: "staging_target_path",
                staging: true,
                path: &req.staging_target_path,
                capability: req.volume_capability.as_ref(),
                context: &req.volume_context,
                secrets: &req.secrets,
            },
            default_config,
        )
    }

    fn from_request(
        req: Request<'_>,
        default_config: &std::path::Path,
    ) -> Result<VolumeSpec, CsiError> {
        let invalid = |m: &str| CsiError::Invalid(m.to_owned());
        if req.volume_id.is_empty() {
            return Err(invalid("volume_id is missing"));
        }
        if req.path.is_empty() {
            return Err(CsiError::Invalid(format!("{} is missing", req.path_name)));
        }
        let target = PathBuf::from(req.path);
        if !target.is_absolute() {
            return Err(CsiError::Invalid(format!(
                "{} {:?} is not an absolute path",
                req.path_name, req.path
            )));
        }
        let cap = req
            .capability
            .as_ref()
            .ok_or_else(|| invalid("volume_capability is missing"))?;
        let flags = match &cap.access_type {
            Some(proto::volume_capability::AccessType::Mount(m)) => &m.mount_flags,
            Some(proto::volume_capability::AccessType::Block(_)) => {
                return Err(invalid(
                    "volume_capability asks for a block device: shoal volumes are file systems",
                ))
            }
            None => return Err(invalid("volume_capability has no access type (mount)")),
        };
        let mode = cap.access_mode.as_ref().map_or(0, |m| m.mode);
        if mode == proto::volume_capability::access_mode::Mode::Unknown as i32 {
            return Err(invalid("volume_capability's access mode is missing"));
        }
        let args = crate::options::to_args(flags)?;
        let ctx = req.context;
        for k in ctx.keys() {
            if !ATTRIBUTES.contains(&k.as_str()) && !k.starts_with(KUBELET_PREFIX) {
                return Err(CsiError::Invalid(format!(
                    "volume attribute {k:?} is not one shoal takes (known: {})",
                    ATTRIBUTES.join(", ")
                )));
            }
        }
        let bucket = ctx
            .get("bucket")
            .filter(|b| !b.is_empty())
            .ok_or_else(|| invalid("volume attribute bucket is missing"))?;
        let prefix = ctx.get("prefix").cloned().unwrap_or_default();
        let (bucket, prefix) = shoal_mount::parse_source(&format!("{bucket}/{prefix}"))
            .map_err(|e| CsiError::Invalid(format!("volume attribute bucket: {e}")))?;
        if prefix.split('/').any(|s| s == "." || s == "..") {
            return Err(CsiError::Invalid(format!(
                "volume attribute prefix {prefix:?} has a . or .. segment"
            )));
        }
        let config = match ctx.get("config") {
            Some(c) if !c.is_empty() => PathBuf::from(c),
            _ => default_config.to_owned(),
        };
        if !config.is_file() {
            return Err(CsiError::Invalid(format!(
                "volume attribute config: {} is not a file in the driver (a ConfigMap mounted there, say)",
                config.display()
            )));
        }
        let (auth, token) = match ctx.get("authenticationSource").map(String::as_str) {
            None | Some("driver") => (Auth::Driver, None),
            Some("pod") if req.staging => (
                Auth::Pod {
                    namespace: String::new(),
                    service_account: String::new(),
                    pod_uid: String::new(),
                },
                None,
            ),
            Some("pod") => pod_auth(ctx, req.secrets)?,
            Some(other) => {
                return Err(CsiError::Invalid(format!(
                    "volume attribute authenticationSource {other:?} is neither driver nor pod"
                )))
            }
        };
        let cache = match (ctx.get("cache").map(String::as_str), ctx.get("cacheSize")) {
            (None, None) => None,
            (Some("emptyDir"), size) => {
                let size = size.cloned().unwrap_or_else(|| "10GiB".into());
                shoal::config::units::Size::parse(&size)
                    .map_err(|e| CsiError::Invalid(format!("volume attribute cacheSize: {e}")))?;
                Some(size)
            }
            (Some(other), _) => {
                return Err(CsiError::Invalid(format!(
                    "volume attribute cache {other:?}: only emptyDir (a disk tier that lives and dies with the volume)"
                )))
            }
            (None, Some(_)) => {
                return Err(invalid(
                    "volume attribute cacheSize goes with cache: emptyDir",
                ))
            }
        };
        let memory_limit = match ctx.get("memoryLimit") {
            None => None,
            Some(m) => {
                let size = shoal::config::units::Size::parse(m)
                    .map_err(|e| CsiError::Invalid(format!("volume attribute memoryLimit: {e}")))?;
                if size.0 < shoal_mount::memory::LIMIT_MIN {
                    return Err(CsiError::Invalid(format!(
                        "volume attribute memoryLimit {m:?} is below the least a mount runs in ({} MiB)",
                        shoal_mount::memory::LIMIT_MIN >> 20
                    )));
                }
                Some(m.clone())
            }
        };
        Ok(VolumeSpec {
            memory_limit,
            volume_id: req.volume_id.to_owned(),
            target,
            bucket,
            prefix,
            config,
            args,
            auth,
            token,
            cache,
            ephemeral: ctx.get(EPHEMERAL).is_some_and(|v| v == "true"),
        })
    }

    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint {
            volume_id: self.volume_id.clone(),
            bucket: self.bucket.clone(),
            prefix: self.prefix.clone(),
            config: self.config.clone(),
            args: self.args.clone(),
            auth: self.auth.clone(),
            cache: self.cache.clone(),
            memory_limit: self.memory_limit.clone(),
        }
    }

    /// `BUCKET[/PREFIX]` as `shoal-mount` takes it.
    pub fn source(&self) -> String {
        format!("{}/{}", self.bucket, self.prefix)
    }
}

/// The pod's identity and its token for STS, from what kubelet hands over when
/// the CSIDriver asks for it (`podInfoOnMount`, `tokenRequests`).
fn pod_auth(
    ctx: &HashMap<String, String>,
    secrets: &HashMap<String, String>,
) -> Result<(Auth, Option<String>), CsiError> {
    let need = |k: &str| {
        ctx.get(k)
            .filter(|v| !v.is_empty())
            .cloned()
            .ok_or_else(|| {
                CsiError::Invalid(format!(
                    "authenticationSource: pod needs {k} (the CSIDriver's podInfoOnMount: true)"
                ))
            })
    };
    let namespace = need("csi.storage.k8s.io/pod.namespace")?;
    let service_account = need("csi.storage.k8s.io/serviceAccount.name")?;
    let pod_uid = need("csi.storage.k8s.io/pod.uid")?;
    let tokens = secrets.get(TOKENS).or_else(|| ctx.get(TOKENS)).ok_or_else(|| {
        CsiError::Invalid(format!(
            "authenticationSource: pod needs {TOKENS} (the CSIDriver's tokenRequests with audience sts.amazonaws.com)"
        ))
    })?;
    #[derive(Deserialize)]
    struct Token {
        token: String,
    }
    let tokens: HashMap<String, Token> = serde_json::from_str(tokens)
        .map_err(|e| CsiError::Invalid(format!("{TOKENS} is not the map kubelet sends: {e}")))?;
    let token = tokens
        .get("sts.amazonaws.com")
        .map(|t| t.token.clone())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            CsiError::Invalid(format!(
                "{TOKENS} has no token for audience sts.amazonaws.com (the CSIDriver's tokenRequests)"
            ))
        })?;
    Ok((
        Auth::Pod {
            namespace,
            service_account,
            pod_uid,
        },
        Some(token),
    ))
}
