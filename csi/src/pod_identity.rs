//! A pod's own AWS identity, for a volume with `authenticationSource: pod`: the
//! role its ServiceAccount names (`eks.amazonaws.com/role-arn`, read from the
//! Kubernetes API as the driver's own service account may), and its token for
//! STS, written where that volume's mount reads web-identity credentials and
//! rewritten at every republish (kubelet's `requiresRepublish`), so the token
//! never runs out under a mount.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::CsiError;
use crate::kube::KubeApi;

/// The annotation EKS (IRSA) puts the role on.
pub const ROLE_ANNOTATION: &str = "eks.amazonaws.com/role-arn";

impl KubeApi {
    /// The role ServiceAccount `namespace/name` names.
    pub async fn role_of(&self, namespace: &str, name: &str) -> Result<String, CsiError> {
        let body = self
            .get(&format!(
                "/api/v1/namespaces/{namespace}/serviceaccounts/{name}"
            ))
            .await
            .map_err(|e| {
                CsiError::Invalid(format!(
                    "cannot read ServiceAccount {namespace}/{name} for its role: {e}"
                ))
            })?;
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
