//! Nodes from a Kubernetes Service's EndpointSlices: listed, then watched from
//! the list's resourceVersion (with bookmarks, so a resumed watch starts where
//! the last one ended), listed again when the API says the version is gone
//! (410) or the watch breaks. Each ready endpoint is a node `ADDRESS:PORT` with
//! its zone; one that is not ready (starting, terminating, failing its probe)
//! is not. What the API says is the whole truth: every endpoint gone, or none
//! ready, means no node, and reads go to the origin. The answers are read as
//! the API server writes them ([`slices`]).
//!
//! A few calls by hand over the HTTP client the crate already has, rather than
//! a Kubernetes client crate and its generated types for every API object.

mod slices;

use std::time::Duration;

use futures_util::StreamExt;

pub use slices::Slices;

use crate::config::KubeService;

/// How long a watch may go without a byte (bookmarks come about once a
/// minute) before it is taken for broken.
const IDLE: Duration = Duration::from_secs(150);
/// What a watch asks the server to end it after; it is then resumed.
const WATCH_SECONDS: u64 = 300;
const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// Why a list or a watch ended.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("{path}: {error}")]
    Token {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    #[error("{0}")]
    Http(String),
    #[error("the API answered {status}: {message}")]
    Status { status: u16, message: String },
    /// The version to resume from is no longer kept: list again.
    #[error("the resource version expired")]
    Expired,
    #[error("not an EndpointSlice answer: {0}")]
    Bad(String),
}

/// A client of the API for one Service's slices.
pub struct Watcher {
    svc: KubeService,
    http: reqwest::Client,
}

impl Watcher {
    pub fn new(svc: KubeService) -> Result<Watcher, WatchError> {
        let mut b = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .no_proxy();
        if let Some(ca) = svc.ca_file.as_ref().filter(|c| c.exists()) {
            let pem = std::fs::read(ca).map_err(|error| WatchError::Token {
                path: ca.clone(),
                error,
            })?;
            for c in reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| WatchError::Http(format!("{}: {e}", ca.display())))?
            {
                b = b.add_root_certificate(c);
            }
        }
        Ok(Watcher {
            svc,
            http: b.build().map_err(|e| WatchError::Http(e.to_string()))?,
        })
    }

    fn url(&self, extra: &str) -> String {
        format!(
            "{}/apis/discovery.k8s.io/v1/namespaces/{}/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3D{}{extra}",
            self.svc.api, self.svc.namespace, self.svc.service
        )
    }

    async fn get(
        &self,
        url: &str,
        timeout: Option<Duration>,
    ) -> Result<reqwest::Response, WatchError> {
        // Read at every call: kubelet rotates a projected token.
        let token =
            std::fs::read_to_string(&self.svc.token_file).map_err(|error| WatchError::Token {
                path: self.svc.token_file.clone(),
                error,
            })?;
        let mut req = self.http.get(url).bearer_auth(token.trim());
        if let Some(t) = timeout {
            req = req.timeout(t);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| WatchError::Http(e.to_string()))?;
        let status = resp.status();
        if status == reqwest::StatusCode::GONE {
            return Err(WatchError::Expired);
        }
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            let message = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["message"].as_str().map(str::to_owned))
                .unwrap_or(body);
            return Err(WatchError::Status {
                status: status.as_u16(),
                message,
            });
        }
        Ok(resp)
    }

    /// Every slice now, and the version to watch from.
    pub async fn list(&self) -> Result<(Slices, String), WatchError> {
        let resp = self
            .get(&self.url(""), Some(Duration::from_secs(30)))
            .await?;
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| WatchError::Http(e.to_string()))?;
        Slices::from_list(&self.svc, &bytes)
    }

    /// Applies the changes after `*version` to `slices`, calling `changed` after
    /// each, until the watch ends (then `Ok`: resume from `*version`) or fails.
    pub async fn watch(
        &self,
        slices: &mut Slices,
        version: &mut String,
        mut changed: impl FnMut(&Slices),
    ) -> Result<(), WatchError> {
        let url = self.url(&format!(
            "&watch=1&allowWatchBookmarks=true&timeoutSeconds={WATCH_SECONDS}&resourceVersion={version}"
        ));
        let resp = self.get(&url, None).await?;
        let mut body = resp.bytes_stream();
        let mut line = Vec::new();
        loop {
            let chunk = match tokio::time::timeout(IDLE, body.next()).await {
                Err(_) => {
                    return Err(WatchError::Http(format!(
                        "no word from the watch in {IDLE:?}"
                    )))
                }
                Ok(None) => return Ok(()),
                Ok(Some(Err(e))) => return Err(WatchError::Http(e.to_string())),
                Ok(Some(Ok(c))) => c,
            };
            for b in chunk {
                if b != b'\n' {
                    line.push(b);
                    continue;
                }
                let text = std::mem::take(&mut line);
                if slices.apply_event(&self.svc, &text, version)? {
                    changed(slices);
                }
            }
        }
    }

    /// Lists and watches for as long as `apply` says to go on (it returns false
    /// once nobody needs the set), with back-off between failures.
    pub async fn run(self, mut apply: impl FnMut(&Slices) -> bool) {
        let mut backoff = BACKOFF_MIN;
        let what = format!("{}/{}", self.svc.namespace, self.svc.service);
        loop {
            let (mut slices, mut version) = match self.list().await {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(service = %what, "cannot list the nodes' EndpointSlices, keeping the current nodes: {e}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    continue;
                }
            };
            if !apply(&slices) {
                return;
            }
            backoff = BACKOFF_MIN;
            loop {
                let mut alive = true;
                let r = self
                    .watch(&mut slices, &mut version, |s| alive = alive && apply(s))
                    .await;
                if !alive {
                    return;
                }
                match r {
                    Ok(()) => continue,
                    Err(WatchError::Expired) => {
                        tracing::info!(service = %what, "the watch's version expired; listing again");
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(service = %what, "the EndpointSlice watch broke, listing again: {e}");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(BACKOFF_MAX);
                        break;
                    }
                }
            }
        }
    }
}
