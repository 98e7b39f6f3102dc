//! The Kubernetes API as the plugin reads it: GETs of single objects (a pod's
//! ServiceAccount for its role, this node for its zone) with the service
//! account's token, through the cluster's CA.

use std::path::{Path, PathBuf};

/// How the plugin reaches the Kubernetes API (in a cluster: its service account).
#[derive(Clone, Debug)]
pub struct KubeApi {
    pub url: String,
    pub token_file: PathBuf,
    pub ca_file: Option<PathBuf>,
}

/// Why an object could not be read.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("{path}: {error}")]
    File {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{0}")]
    Client(String),
    #[error("{status}: {message}")]
    Status {
        status: reqwest::StatusCode,
        message: String,
    },
    #[error("{status}: not JSON: {error}")]
    NotJson {
        status: reqwest::StatusCode,
        error: serde_json::Error,
    },
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

    /// The object at `path` (`/api/v1/...`), as JSON.
    pub async fn get(&self, path: &str) -> Result<serde_json::Value, KubeError> {
        let file_err = |path: &Path| {
            let path = path.to_owned();
            move |error| KubeError::File { path, error }
        };
        // Read at every call: the kubelet rotates the projected token.
        let token =
            std::fs::read_to_string(&self.token_file).map_err(file_err(&self.token_file))?;
        let mut b = reqwest::Client::builder().timeout(std::time::Duration::from_secs(10));
        if let Some(ca) = self.ca_file.as_ref().filter(|c| c.exists()) {
            let pem = std::fs::read(ca).map_err(file_err(ca))?;
            for c in reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| KubeError::Client(format!("{}: {e}", ca.display())))?
            {
                b = b.add_root_certificate(c);
            }
        }
        let client = b.build().map_err(|e| KubeError::Client(e.to_string()))?;
        let url = format!("{}{path}", self.url.trim_end_matches('/'));
        let resp = client
            .get(&url)
            .bearer_auth(token.trim())
            .send()
            .await
            .map_err(|e| KubeError::Client(e.to_string()))?;
        let status = resp.status();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| KubeError::Client(e.to_string()))?;
        let body: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|error| KubeError::NotJson { status, error })?;
        if !status.is_success() {
            return Err(KubeError::Status {
                status,
                message: body["message"].as_str().unwrap_or("").to_owned(),
            });
        }
        Ok(body)
    }
}
