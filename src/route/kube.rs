//! Nodes from a Kubernetes Service's EndpointSlices: listed, then watched from
//! the list's resourceVersion (with bookmarks, so a resumed watch starts where
//! the last one ended), listed again when the API says the version is gone
//! (410) or the watch breaks. Each ready endpoint is a node `ADDRESS:PORT` with
//! its zone; one that is not ready (starting, terminating, failing its probe)
//! is not. What the API says is the whole truth: every endpoint gone means no
//! node, and reads go to the origin.
//!
//! A few calls by hand over the HTTP client the crate already has, rather than
//! a Kubernetes client crate and its generated types for every API object.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt;
use serde::Deserialize;

use crate::config::{canonical_node_id, KubeService, NodeSpec};

/// How long a watch may go without a byte (bookmarks come about once a
/// minute) before it is taken for broken.
const IDLE: Duration = Duration::from_secs(150);
/// What a watch asks the server to end it after; it is then resumed.
const WATCH_SECONDS: u64 = 300;
const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

#[derive(Deserialize)]
struct List {
    metadata: Meta,
    #[serde(default)]
    items: Vec<Slice>,
}

#[derive(Deserialize, Default)]
struct Meta {
    #[serde(default)]
    name: String,
    #[serde(default, rename = "resourceVersion")]
    resource_version: String,
}

#[derive(Deserialize)]
struct Slice {
    metadata: Meta,
    #[serde(default)]
    endpoints: Vec<Endpoint>,
    #[serde(default)]
    ports: Option<Vec<Port>>,
}

#[derive(Deserialize)]
struct Endpoint {
    #[serde(default)]
    addresses: Vec<String>,
    #[serde(default)]
    conditions: Conditions,
    zone: Option<String>,
}

#[derive(Deserialize, Default)]
struct Conditions {
    /// Absent means ready (the API's rule for an unknown state).
    ready: Option<bool>,
}

#[derive(Deserialize)]
struct Port {
    name: Option<String>,
    port: Option<u16>,
}

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    object: serde_json::Value,
}

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

/// The slices of one Service, by name: what the API has told so far.
#[derive(Default)]
pub struct Slices {
    by_name: BTreeMap<String, Vec<NodeSpec>>,
}

impl Slices {
    /// Every node of every slice, in a stable order.
    pub fn nodes(&self) -> Vec<NodeSpec> {
        let mut all: Vec<NodeSpec> = self.by_name.values().flatten().cloned().collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all.dedup_by(|a, b| a.id == b.id);
        all
    }

    /// A list answer's slices, and the version to watch from.
    pub fn from_list(svc: &KubeService, body: &[u8]) -> Result<(Slices, String), WatchError> {
        let list: List =
            serde_json::from_slice(body).map_err(|e| WatchError::Bad(e.to_string()))?;
        let mut slices = Slices::default();
        for s in &list.items {
            slices.put(svc, s);
        }
        Ok((slices, list.metadata.resource_version))
    }

    /// Applies one line of a watch's answer: whether the slices changed. A
    /// bookmark moves `version` on; an ERROR event ends the watch (410: the
    /// version is gone, list again).
    pub fn apply_event(
        &mut self,
        svc: &KubeService,
        line: &[u8],
        version: &mut String,
    ) -> Result<bool, WatchError> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(false);
        }
        let ev: Event = serde_json::from_slice(line).map_err(|e| WatchError::Bad(e.to_string()))?;
        match ev.kind.as_str() {
            "ERROR" => {
                let code = ev.object["code"].as_u64();
                if code == Some(410) {
                    return Err(WatchError::Expired);
                }
                Err(WatchError::Status {
                    status: code.and_then(|c| u16::try_from(c).ok()).unwrap_or(0),
                    message: ev.object["message"].as_str().unwrap_or("").to_owned(),
                })
            }
            "BOOKMARK" => {
                if let Some(v) = ev.object["metadata"]["resourceVersion"].as_str() {
                    *version = v.to_owned();
                }
                Ok(false)
            }
            kind @ ("ADDED" | "MODIFIED" | "DELETED") => {
                let s: Slice = serde_json::from_value(ev.object)
                    .map_err(|e| WatchError::Bad(e.to_string()))?;
                if kind == "DELETED" {
                    self.by_name.remove(&s.metadata.name);
                } else {
                    self.put(svc, &s);
                }
                *version = s.metadata.resource_version.clone();
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn put(&mut self, svc: &KubeService, s: &Slice) {
        self.by_name
            .insert(s.metadata.name.clone(), ready_nodes(svc, s));
    }
}

/// The ready endpoints of `s` as nodes on the Service's port.
fn ready_nodes(svc: &KubeService, s: &Slice) -> Vec<NodeSpec> {
    let ports = s.ports.as_deref().unwrap_or_default();
    let port = match &svc.port {
        Some(want) => ports
            .iter()
            .find(|p| p.name.as_deref() == Some(want.as_str())),
        None => ports.first(),
    }
    .and_then(|p| p.port);
    let Some(port) = port else {
        // A slice without the port (yet): none of its endpoints can be reached.
        return Vec::new();
    };
    s.endpoints
        .iter()
        .filter(|e| e.conditions.ready != Some(false))
        .flat_map(|e| {
            // Addresses only (an FQDN slice's names are skipped): members are
            // found with no name resolved.
            e.addresses.iter().filter_map(move |a| {
                let ip: std::net::IpAddr = a.parse().ok()?;
                Some(NodeSpec {
                    id: canonical_node_id(&std::net::SocketAddr::new(ip, port).to_string()).ok()?,
                    weight: 1.0,
                    zone: e.zone.clone(),
                })
            })
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(port: Option<&str>) -> KubeService {
        KubeService {
            namespace: "shoal".into(),
            service: "shoal-node".into(),
            port: port.map(str::to_owned),
            api: "http://127.0.0.1:1".into(),
            token_file: "/nonexistent".into(),
            ca_file: None,
        }
    }

    #[test]
    fn ready_endpoints_on_the_named_port_with_their_zones() {
        let s: Slice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s1", "resourceVersion": "7"},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": true}, "zone": "a"},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": false}, "zone": "a"},
                {"addresses": ["10.0.0.3"], "zone": "b"},
                {"addresses": ["fd00::4"], "conditions": {"ready": true}},
                {"addresses": ["node-5.example.com"], "conditions": {"ready": true}}
            ],
            "ports": [{"name": "metrics", "port": 9180}, {"name": "s3", "port": 9000}]
        }))
        .unwrap();
        let ids = |v: Vec<NodeSpec>| -> Vec<(String, Option<String>)> {
            v.into_iter().map(|n| (n.id, n.zone)).collect()
        };
        assert_eq!(
            ids(ready_nodes(&svc(Some("s3")), &s)),
            vec![
                ("10.0.0.1:9000".into(), Some("a".into())),
                ("10.0.0.3:9000".into(), Some("b".into())),
                ("[fd00::4]:9000".into(), None),
            ]
        );
        // No port name: the first port.
        assert_eq!(ready_nodes(&svc(None), &s)[0].id, "10.0.0.1:9180");
        // A port the slice does not have: nobody.
        assert!(ready_nodes(&svc(Some("grpc")), &s).is_empty());
    }

    #[test]
    fn a_watch_adds_changes_and_deletes_slices_and_ends_on_an_error() {
        let svc = svc(Some("s3"));
        let (mut slices, mut v) = Slices::from_list(
            &svc,
            br#"{"metadata": {"resourceVersion": "5"}, "items": [{"metadata": {"name": "a"},
                "endpoints": [{"addresses": ["10.0.0.1"]}], "ports": [{"name": "s3", "port": 9000}]}]}"#,
        )
        .unwrap();
        assert_eq!(v, "5");
        let ids = |s: &Slices| s.nodes().into_iter().map(|n| n.id).collect::<Vec<_>>();
        assert_eq!(ids(&slices), ["10.0.0.1:9000"]);
        let added =
            br#"{"type": "ADDED", "object": {"metadata": {"name": "b", "resourceVersion": "6"},
            "endpoints": [{"addresses": ["10.0.0.2"], "conditions": {"ready": true}}],
            "ports": [{"name": "s3", "port": 9000}]}}"#;
        assert!(slices.apply_event(&svc, added, &mut v).unwrap());
        assert_eq!(
            (ids(&slices), v.as_str()),
            (
                vec!["10.0.0.1:9000".to_owned(), "10.0.0.2:9000".to_owned()],
                "6"
            )
        );
        let bookmark = br#"{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}"#;
        assert!(!slices.apply_event(&svc, bookmark, &mut v).unwrap());
        assert_eq!(v, "9");
        let deleted = br#"{"type": "DELETED", "object": {"metadata": {"name": "a", "resourceVersion": "10"}}}"#;
        assert!(slices.apply_event(&svc, deleted, &mut v).unwrap());
        assert_eq!(ids(&slices), ["10.0.0.2:9000"]);
        assert!(!slices.apply_event(&svc, b"  \r", &mut v).unwrap());
        let gone = br#"{"type": "ERROR", "object": {"code": 410, "message": "too old"}}"#;
        assert!(matches!(
            slices.apply_event(&svc, gone, &mut v),
            Err(WatchError::Expired)
        ));
        let denied = br#"{"type": "ERROR", "object": {"code": 403, "message": "forbidden"}}"#;
        assert!(matches!(
            slices.apply_event(&svc, denied, &mut v),
            Err(WatchError::Status { status: 403, .. })
        ));
        for bad in [
            &b"{"[..],
            b"[]",
            br#"{"type": "ADDED", "object": {"endpoints": 3}}"#,
        ] {
            assert!(
                matches!(
                    slices.apply_event(&svc, bad, &mut v),
                    Err(WatchError::Bad(_))
                ),
                "{bad:?}"
            );
        }
        assert_eq!(
            ids(&slices),
            ["10.0.0.2:9000"],
            "a bad line changed nothing"
        );
    }
}
