//! The Kubernetes API calls a CSI node plugin makes, on loopback: a
//! ServiceAccount read (`GET /api/v1/namespaces/NS/serviceaccounts/NAME`), for
//! the role its `eks.amazonaws.com/role-arn` annotation names, and a Node read
//! (`GET /api/v1/nodes/NAME`), for its zone label. Requests must carry the
//! plugin's bearer token, as the API server wants. Objects are written as the
//! API server's Go encoding writes them: an empty map (`labels`,
//! `annotations`, both `omitempty`) is left out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

type Accounts = Arc<Mutex<HashMap<(String, String), HashMap<String, String>>>>;
/// Nodes by name, with their labels.
type Nodes = Arc<Mutex<HashMap<String, HashMap<String, String>>>>;

pub struct KubeApi {
    pub addr: std::net::SocketAddr,
    /// The bearer token requests must show.
    pub token: String,
    accounts: Accounts,
    reads: Arc<Mutex<u64>>,
    nodes: Nodes,
    node_reads: Arc<Mutex<u64>>,
    _task: tokio::task::JoinHandle<()>,
}

impl KubeApi {
    pub async fn start() -> KubeApi {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let token = "kube-api-token-of-the-plugin".to_owned();
        let accounts: Accounts = Arc::default();
        let reads = Arc::new(Mutex::new(0));
        let nodes: Nodes = Arc::default();
        let node_reads = Arc::new(Mutex::new(0));
        let (a, t, r) = (accounts.clone(), token.clone(), reads.clone());
        let (n, nr) = (nodes.clone(), node_reads.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    continue;
                };
                let (a, t, r) = (a.clone(), t.clone(), r.clone());
                let (n, nr) = (n.clone(), nr.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let resp = match node_read(&n, &t, &nr, &req) {
                            Some(resp) => resp,
                            None => answer(&a, &t, &r, req),
                        };
                        async move { Ok::<_, std::convert::Infallible>(resp) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(sock), svc)
                        .await;
                });
            }
        });
        KubeApi {
            addr,
            token,
            accounts,
            reads,
            nodes,
            node_reads,
            _task: task,
        }
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A ServiceAccount `namespace/name` with `annotations`.
    pub fn service_account(&self, namespace: &str, name: &str, annotations: &[(&str, &str)]) {
        self.accounts.lock().unwrap().insert(
            (namespace.to_owned(), name.to_owned()),
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
    }

    /// ServiceAccount reads answered so far.
    pub fn reads(&self) -> u64 {
        *self.reads.lock().unwrap()
    }

    /// A Node `name` with `labels`.
    pub fn node(&self, name: &str, labels: &[(&str, &str)]) {
        self.nodes.lock().unwrap().insert(
            name.to_owned(),
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
    }

    /// Node reads answered so far (with the right token).
    pub fn node_reads(&self) -> u64 {
        *self.node_reads.lock().unwrap()
    }
}

/// The answer to a read of a Node, if `req` is one: the node with its labels,
/// 404 for a node not made, 401 without the token.
fn node_read(
    nodes: &Nodes,
    token: &str,
    reads: &Mutex<u64>,
    req: &Request<Incoming>,
) -> Option<Response<Full<Bytes>>> {
    let path = req.uri().path();
    let name = path.strip_prefix("/api/v1/nodes/")?;
    let reply = |status: StatusCode, body: String| {
        Some(
            Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body)))
                .unwrap(),
        )
    };
    let bearer = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if bearer != Some(token) {
        return reply(StatusCode::UNAUTHORIZED, UNAUTHORIZED.into());
    }
    *reads.lock().unwrap() += 1;
    match nodes.lock().unwrap().get(name) {
        Some(labels) => reply(
            StatusCode::OK,
            serde_json::json!({
                "kind": "Node",
                "apiVersion": "v1",
                "metadata": meta(name, None, "labels", labels),
            })
            .to_string(),
        ),
        None => reply(
            StatusCode::NOT_FOUND,
            format!(
                r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"nodes \"{name}\" not found","reason":"NotFound","details":{{"name":"{name}","kind":"nodes"}},"code":404}}"#
            ),
        ),
    }
}

/// What the API answers a request without the token.
const UNAUTHORIZED: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#;

/// An object's metadata with map `field` (labels, annotations) left out when
/// empty, as `omitempty` does.
fn meta(
    name: &str,
    namespace: Option<&str>,
    field: &str,
    map: &HashMap<String, String>,
) -> serde_json::Value {
    let mut m = serde_json::json!({ "name": name });
    if let Some(ns) = namespace {
        m["namespace"] = ns.into();
    }
    if !map.is_empty() {
        m[field] = serde_json::json!(map);
    }
    m
}

fn answer(
    a: &Accounts,
    token: &str,
    reads: &Mutex<u64>,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, body: String| {
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap()
    };
    let bearer = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if bearer != Some(token) {
        return reply(StatusCode::UNAUTHORIZED, UNAUTHORIZED.into());
    }
    let path = req.uri().path().to_owned();
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let ["api", "v1", "namespaces", ns, "serviceaccounts", name] = parts[..] else {
        return reply(
            StatusCode::NOT_FOUND,
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}"#.into(),
        );
    };
    *reads.lock().unwrap() += 1;
    match a.lock().unwrap().get(&(ns.to_owned(), name.to_owned())) {
        Some(ann) => reply(
            StatusCode::OK,
            serde_json::json!({
                "kind": "ServiceAccount",
                "apiVersion": "v1",
                "metadata": meta(name, Some(ns), "annotations", ann),
            })
            .to_string(),
        ),
        None => reply(
            StatusCode::NOT_FOUND,
            format!(
                r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"serviceaccounts \"{name}\" not found","reason":"NotFound","details":{{"name":"{name}","kind":"serviceaccounts"}},"code":404}}"#
            ),
        ),
    }
}
