//! A pod's own AWS identity, for a volume with `authenticationSource: pod`: the
//! role its ServiceAccount names (`eks.amazonaws.com/role-arn`, read from the
//! Kubernetes API as the driver's own service account may), and its token for
//! STS, written where that volume's mount reads web-identity credentials
//! ([`crate::tokens`]) and rewritten at every republish (kubelet's
//! `requiresRepublish`), so the token never runs out under a mount.

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
