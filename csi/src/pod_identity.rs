//! A pod's own AWS identity, for a volume with `authenticationSource: pod`: the
//! role its ServiceAccount names (`eks.amazonaws.com/role-arn`, read from the
//! Kubernetes API as the driver's own service account may), and its token for
//! STS, written where that volume's mount reads web-identity credentials and
//! rewritten at every republish (kubelet's `requiresRepublish`), so the token
//! never runs out under a mount.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::CsiError;

/// The annotation EKS (IRSA) puts the role on.
pub const ROLE_ANNOTATION: &str = "eks.amazonaws.com/role-arn";

/// How the plugin reaches the Kubernetes API (in a cluster: its service account).
#[derive(Clone, Debug)]
pub struct KubeApi {
    pub url: String,
    pub token_file: PathBuf,
    pub ca_file: Option<PathBuf>,
}

impl KubeApi {
    /// The API server a pod reaches, with its service account's token and CA.
    pub fn in_cluster() -> KubeApi {
        let host = std::env::var("KUBERNETES_SERVICE_HOST")
            .unwrap_or_else(|_| "kubernetes.default.svc".into());
        let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
        let dir = Path::new("/var/run/secrets/kubernetes.io/serviceaccount");
        KubeApi {
            url: format!("https://{host}:{port}"),
            token_file: dir.join("token"),
            ca_file: Some(dir.join("ca.crt")),
        }
    }

    /// The role ServiceAccount `namespace/name` names.
    pub async fn role_of(&self, namespace: &str, name: &str) -> Result<String, CsiError> {
        let api_err = |m: String| {
            CsiError::Invalid(format!(
                "cannot read ServiceAccount {namespace}/{name} for its role: {m}"
            ))
        };
        let token = std::fs::read_to_string(&self.token_file)
            .map_err(|e| api_err(format!("{}: {e}", self.token_file.display())))?;
        let mut b = reqwest::Client::builder().timeout(std::time::Duration::from_secs(10));
        if let Some(ca) = self.ca_file.as_ref().filter(|c| c.exists()) {
            let pem = std::fs::read(ca).map_err(|e| api_err(format!("{}: {e}", ca.display())))?;
            for c in reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| api_err(format!("{}: {e}", ca.display())))?
            {
                b = b.add_root_certificate(c);
            }
        }
        let client = b.build().map_err(|e| api_err(e.to_string()))?;
        let url = format!(
            "{}/api/v1/namespaces/{namespace}/serviceaccounts/{name}",
            self.url.trim_end_matches('/')
        );
        let resp = client
            .get(&url)
            .bearer_auth(token.trim())
            .send()
            .await
            .map_err(|e| api_err(e.to_string()))?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| api_err(e.to_string()))?;
        let body: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| api_err(format!("{status}: not JSON: {e}")))?;
        if !status.is_success() {
            return Err(api_err(format!(
                "{status}: {}",
                body["message"].as_str().unwrap_or("")
            )));
        }
        body["metadata"]["annotations"][ROLE_ANNOTATION]
            .as_str()
            .filter(|r| !r.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| {
                CsiError::Invalid(format!(
                    "ServiceAccount {namespace}/{name} has no {ROLE_ANNOTATION} annotation: no role for authenticationSource: pod"
                ))
            })
    }
}

/// Writes `token` to `path` whole (a reader sees the old token or the new one,
/// never part of one), readable by this user only.
pub fn write_token(path: &Path, token: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(token.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}
