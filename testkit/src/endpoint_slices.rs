//! The Kubernetes API's EndpointSlice list and watch (`discovery.k8s.io/v1`), on
//! loopback, for what follows a Service's endpoints: `GET
//! /apis/discovery.k8s.io/v1/namespaces/NS/endpointslices?labelSelector=kubernetes.io/service-name=SVC`
//! lists a Service's slices with the store's resourceVersion; the same with
//! `watch=1&resourceVersion=R` streams (chunked, one JSON event a line) every
//! change after `R`, then the live ones, with bookmarks when asked for and an
//! end after `timeoutSeconds`. [`EndpointSlicesApi::expire`] forgets the
//! history and ends the open watches, as an API server restart does: a watch
//! from before it then gets the 410 `Expired` event. Requests must carry the
//! bearer token, as the API server wants.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The label tying a slice to its Service.
const SERVICE_LABEL: &str = "kubernetes.io/service-name";
/// How often a watch that allows bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_millis(500);
/// What a watch from a forgotten resourceVersion gets, before its end.
const EXPIRED: &str = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410,"message":"too old resource version"}}"#;

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// One endpoint of a slice.
#[derive(Clone, Debug)]
pub struct SliceEndpoint {
    pub address: String,
    pub ready: bool,
    pub zone: Option<String>,
}

/// A slice as stored.
struct Slice {
    service: String,
    port_name: String,
    port: u16,
    endpoints: Vec<SliceEndpoint>,
    /// The store's resourceVersion when it last changed.
    version: u64,
}

impl Slice {
    /// The slice as the API shows it, at resourceVersion `version`.
    fn object(&self, namespace: &str, name: &str, version: u64) -> Value {
        let endpoints: Vec<Value> = self
            .endpoints
            .iter()
            .map(|e| {
                let mut v = json!({
                    "addresses": [e.address],
                    "conditions": {"ready": e.ready, "serving": e.ready, "terminating": false},
                });
                if let Some(zone) = &e.zone {
                    v["zone"] = json!(zone);
                }
                v
            })
            .collect();
        json!({
            "kind": "EndpointSlice",
            "apiVersion": "discovery.k8s.io/v1",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "resourceVersion": version.to_string(),
                "labels": {SERVICE_LABEL: self.service},
            },
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": [{"name": self.port_name, "port": self.port, "protocol": "TCP"}],
        })
    }
}

/// One change kept for watches that resume from before it.
struct Change {
    version: u64,
    namespace: String,
    service: String,
    /// The event, as a watch sends it (newline-terminated).
    line: Bytes,
}

/// An open watch: the events it is to send, to its task.
struct Watcher {
    namespace: String,
    /// `None`: every service of the namespace (no label selector).
    service: Option<String>,
    events: mpsc::UnboundedSender<Bytes>,
}

impl Watcher {
    fn wants(&self, namespace: &str, service: &str) -> bool {
        self.namespace == namespace && self.service.as_deref().is_none_or(|s| s == service)
    }
}

#[derive(Default)]
struct Store {
    /// The resourceVersion: how many changes so far.
    version: u64,
    /// The version at the last `expire()`: watches from before it get 410.
    expired_at: u64,
    /// Slices by (namespace, name).
    slices: BTreeMap<(String, String), Slice>,
    /// The changes since `expired_at`, oldest first.
    history: Vec<Change>,
    watchers: Vec<Watcher>,
    lists: u64,
    watches: u64,
}

impl Store {
    /// Keeps a change and sends it to the watchers of its namespace and service.
    fn publish(&mut self, namespace: &str, service: &str, kind: &str, object: Value) {
        let line = event_line(kind, object);
        // A watcher whose client went away has dropped its end.
        self.watchers.retain(|w| !w.events.is_closed());
        for w in self.watchers.iter().filter(|w| w.wants(namespace, service)) {
            let _ = w.events.send(line.clone());
        }
        self.history.push(Change {
            version: self.version,
            namespace: namespace.to_owned(),
            service: service.to_owned(),
            line,
        });
    }
}

fn event_line(kind: &str, object: Value) -> Bytes {
    let mut line = json!({"type": kind, "object": object}).to_string();
    line.push('\n');
    Bytes::from(line)
}

pub struct EndpointSlicesApi {
    pub addr: std::net::SocketAddr,
    /// The bearer token requests must show.
    pub token: String,
    store: Arc<Mutex<Store>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for EndpointSlicesApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl EndpointSlicesApi {
    pub async fn start() -> EndpointSlicesApi {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let token = "endpoint-slices-token".to_owned();
        let store: Arc<Mutex<Store>> = Arc::default();
        let (s, t) = (store.clone(), token.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    continue;
                };
                let (s, t) = (s.clone(), t.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let resp = answer(&s, &t, &req);
                        async move { Ok::<_, Infallible>(resp) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(sock), svc)
                        .await;
                });
            }
        });
        EndpointSlicesApi {
            addr,
            token,
            store,
            task,
        }
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Creates or replaces slice `name` in `namespace`, labelled
    /// `kubernetes.io/service-name=service`, its one port named `port_name` with
    /// number `port`, holding `endpoints`. Bumps the store's resourceVersion;
    /// watchers of that namespace and service get ADDED (new) or MODIFIED. A
    /// slice moved to another service is DELETED for the old one's watchers and
    /// ADDED for the new one's, as a label selector's watch sees it.
    pub fn set_slice(
        &self,
        namespace: &str,
        service: &str,
        name: &str,
        port_name: &str,
        port: u16,
        endpoints: &[SliceEndpoint],
    ) {
        let mut s = self.store.lock().unwrap();
        s.version += 1;
        let version = s.version;
        let slice = Slice {
            service: service.to_owned(),
            port_name: port_name.to_owned(),
            port,
            endpoints: endpoints.to_vec(),
            version,
        };
        let object = slice.object(namespace, name, version);
        let old = s
            .slices
            .insert((namespace.to_owned(), name.to_owned()), slice);
        match old {
            Some(old) if old.service == service => {
                s.publish(namespace, service, "MODIFIED", object)
            }
            Some(old) => {
                let gone = old.object(namespace, name, version);
                s.publish(namespace, &old.service, "DELETED", gone);
                s.publish(namespace, service, "ADDED", object);
            }
            None => s.publish(namespace, service, "ADDED", object),
        }
    }

    /// Deletes slice `name` of `namespace` (nothing if there is none): bumps the
    /// resourceVersion, and its service's watchers get DELETED with the last
    /// object, its resourceVersion the deletion's (as the API server sends it).
    pub fn delete_slice(&self, namespace: &str, name: &str) {
        let mut s = self.store.lock().unwrap();
        let Some(old) = s.slices.remove(&(namespace.to_owned(), name.to_owned())) else {
            return;
        };
        s.version += 1;
        let object = old.object(namespace, name, s.version);
        s.publish(namespace, &old.service, "DELETED", object);
    }

    /// Forgets the history so far: a watch from any resourceVersion handed out
    /// before gets the 410 `Expired` ERROR event and its end; the watches open now are
    /// ended (their responses end), as an API server restart does.
    pub fn expire(&self) {
        let mut s = self.store.lock().unwrap();
        // Past every version handed out, as a compaction after a restart: no
        // watch can resume, every watcher lists again.
        s.version += 1;
        s.expired_at = s.version;
        s.history.clear();
        // Their tasks see the channel close, send what they hold and end.
        s.watchers.clear();
    }

    /// List requests answered (with the right token).
    pub fn lists(&self) -> u64 {
        self.store.lock().unwrap().lists
    }

    /// Watch requests started (with the right token), 410 ones included.
    pub fn watches(&self) -> u64 {
        self.store.lock().unwrap().watches
    }
}

fn reply(status: StatusCode, body: String) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)).boxed_unsync())
        .unwrap()
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    reply(
        code,
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code.as_u16(),
        })
        .to_string(),
    )
}

/// The query parameters a list or watch takes.
#[derive(Default)]
struct Query {
    selector: Option<String>,
    watch: bool,
    resource_version: Option<String>,
    bookmarks: bool,
    timeout: Option<u64>,
}

fn query(req: &Request<Incoming>) -> Query {
    let mut q = Query::default();
    let pairs = url::form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes());
    for (k, v) in pairs {
        match &*k {
            "labelSelector" => q.selector = Some(v.into_owned()),
            "watch" => q.watch = v == "1" || v == "true",
            "resourceVersion" => q.resource_version = Some(v.into_owned()),
            "allowWatchBookmarks" => q.bookmarks = v == "1" || v == "true",
            "timeoutSeconds" => q.timeout = v.parse().ok().filter(|t| *t > 0),
            _ => {}
        }
    }
    q
}

/// The service a label selector picks: `Ok(None)` for no selector (every
/// slice of the namespace), `Err` for one this stand-in does not know.
fn selected_service(selector: Option<&str>) -> Result<Option<String>, ()> {
    let Some(selector) = selector.filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let rest = selector
        .strip_prefix(SERVICE_LABEL)
        .map(str::trim_start)
        .ok_or(())?;
    let value = rest
        .strip_prefix("==")
        .or_else(|| rest.strip_prefix('='))
        .ok_or(())?
        .trim();
    if value.is_empty() || value.contains([',', '=', '!', ' ']) {
        return Err(());
    }
    Ok(Some(value.to_owned()))
}

fn answer(store: &Arc<Mutex<Store>>, token: &str, req: &Request<Incoming>) -> Response<Body> {
    let bearer = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if bearer != Some(token) {
        return reply(
            StatusCode::UNAUTHORIZED,
            r#"{"kind":"Status","status":"Failure","reason":"Unauthorized","code":401}"#.into(),
        );
    }
    let path = req.uri().path();
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let ["apis", "discovery.k8s.io", "v1", "namespaces", ns, "endpointslices"] = parts[..] else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource",
        );
    };
    if req.method() != Method::GET {
        return status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "the stand-in only lists and watches endpointslices",
        );
    }
    let q = query(req);
    let Ok(service) = selected_service(q.selector.as_deref()) else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the stand-in only knows the selector kubernetes.io/service-name=NAME",
        );
    };
    if q.watch {
        watch(store, ns, service, &q)
    } else {
        list(store, ns, service.as_deref())
    }
}

fn list(store: &Mutex<Store>, ns: &str, service: Option<&str>) -> Response<Body> {
    let mut s = store.lock().unwrap();
    s.lists += 1;
    let items: Vec<Value> = s
        .slices
        .iter()
        .filter(|((n, _), sl)| n == ns && service.is_none_or(|svc| sl.service == svc))
        .map(|((n, name), sl)| sl.object(n, name, sl.version))
        .collect();
    reply(
        StatusCode::OK,
        json!({
            "kind": "EndpointSliceList",
            "apiVersion": "discovery.k8s.io/v1",
            "metadata": {"resourceVersion": s.version.to_string()},
            "items": items,
        })
        .to_string(),
    )
}

/// Starts a watch: its events (replayed, then live) go into a channel its own
/// task forwards to the response, with bookmarks and the end after the timeout.
fn watch(
    store: &Arc<Mutex<Store>>,
    ns: &str,
    service: Option<String>,
    q: &Query,
) -> Response<Body> {
    let (events_tx, events) = mpsc::unbounded_channel();
    {
        let mut s = store.lock().unwrap();
        s.watches += 1;
        let matches = |namespace: &str, svc: &str| {
            namespace == ns && service.as_deref().is_none_or(|want| want == svc)
        };
        match q.resource_version.as_deref() {
            // No version, or "0": from any point, so the objects there are now
            // (as ADDED events), then the changes.
            None | Some("") | Some("0") => {
                for ((n, name), sl) in &s.slices {
                    if matches(n, &sl.service) {
                        let line = event_line("ADDED", sl.object(n, name, sl.version));
                        let _ = events_tx.send(line);
                    }
                }
            }
            Some(r) => match r.parse::<u64>() {
                Ok(r) if r >= s.expired_at => {
                    for c in &s.history {
                        if c.version > r && matches(&c.namespace, &c.service) {
                            let _ = events_tx.send(c.line.clone());
                        }
                    }
                }
                // From before the last expiry, or no number: the ERROR, and
                // no watcher, so the channel closes once it is read and the
                // response ends.
                _ => {
                    let _ = events_tx.send(Bytes::from(format!("{EXPIRED}\n")));
                    return respond(store, events, false, None);
                }
            },
        }
        s.watchers.push(Watcher {
            namespace: ns.to_owned(),
            service,
            events: events_tx,
        });
    };
    respond(store, events, q.bookmarks, q.timeout)
}

/// The response to a watch, fed by its own task from `events`.
fn respond(
    store: &Arc<Mutex<Store>>,
    events: mpsc::UnboundedReceiver<Bytes>,
    bookmarks: bool,
    timeout: Option<u64>,
) -> Response<Body> {
    let (out, body) = mpsc::channel::<Bytes>(64);
    let deadline = timeout.map(|t| Instant::now() + Duration::from_secs(t));
    tokio::spawn(forward(store.clone(), events, out, bookmarks, deadline));
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(Lines(body).boxed_unsync())
        .unwrap()
}

/// A watch's task: sends its events to the response, a bookmark every
/// [`BOOKMARK_EVERY`] if asked, and ends when the store drops the watch, the
/// client goes away, or `deadline` comes.
async fn forward(
    store: Arc<Mutex<Store>>,
    mut events: mpsc::UnboundedReceiver<Bytes>,
    out: mpsc::Sender<Bytes>,
    bookmarks: bool,
    deadline: Option<Instant>,
) {
    let mut ticks = tokio::time::interval_at(Instant::now() + BOOKMARK_EVERY, BOOKMARK_EVERY);
    let end = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(end);
    loop {
        tokio::select! {
            biased;
            line = events.recv() => {
                let Some(line) = line else { return };
                if out.send(line).await.is_err() {
                    return;
                }
            }
            _ = ticks.tick(), if bookmarks => {
                // Under the store's lock, so the bookmark's version follows
                // every event it covers, and none after a closed watch.
                let (held, version, open) = {
                    let s = store.lock().unwrap();
                    let mut held = Vec::new();
                    let open = loop {
                        match events.try_recv() {
                            Ok(line) => held.push(line),
                            Err(mpsc::error::TryRecvError::Empty) => break true,
                            Err(mpsc::error::TryRecvError::Disconnected) => break false,
                        }
                    };
                    (held, s.version, open)
                };
                for line in held {
                    if out.send(line).await.is_err() {
                        return;
                    }
                }
                if !open {
                    return;
                }
                let bookmark = event_line(
                    "BOOKMARK",
                    json!({
                        "kind": "EndpointSlice",
                        "apiVersion": "discovery.k8s.io/v1",
                        "metadata": {"resourceVersion": version.to_string()},
                    }),
                );
                if out.send(bookmark).await.is_err() {
                    return;
                }
            }
            _ = &mut end => return,
            _ = out.closed() => return,
        }
    }
}

/// A streamed response body: the lines a watch's task sends, each a chunk;
/// it ends when the task drops its sender.
struct Lines(mpsc::Receiver<Bytes>);

impl hyper::body::Body for Lines {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|line| line.map(|l| Ok(Frame::data(l))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &str = "/apis/discovery.k8s.io/v1/namespaces/shoal/endpointslices";
    const ESCAPED: &str = "labelSelector=kubernetes.io%2Fservice-name%3Dcache";
    const PLAIN: &str = "labelSelector=kubernetes.io/service-name=cache";

    fn endpoint(address: &str, ready: bool, zone: Option<&str>) -> SliceEndpoint {
        SliceEndpoint {
            address: address.to_owned(),
            ready,
            zone: zone.map(str::to_owned),
        }
    }

    /// A watch response read a line at a time.
    struct Watch {
        resp: reqwest::Response,
        buf: Vec<u8>,
    }

    impl Watch {
        async fn open(api: &EndpointSlicesApi, extra: &str) -> Watch {
            let resp = reqwest::Client::new()
                .get(format!("{}{PATH}?{ESCAPED}&watch=1&{extra}", api.url()))
                .bearer_auth(&api.token)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200);
            assert_eq!(
                resp.headers()
                    .get("transfer-encoding")
                    .map(|v| v.to_str().unwrap()),
                Some("chunked")
            );
            Watch {
                resp,
                buf: Vec::new(),
            }
        }

        /// The next event, `None` once the response has ended.
        async fn next(&mut self) -> Option<Value> {
            loop {
                if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = self.buf.drain(..=i).collect();
                    return Some(serde_json::from_slice(&line).unwrap());
                }
                let chunk = tokio::time::timeout(Duration::from_secs(5), self.resp.chunk())
                    .await
                    .expect("no word from the watch in 5 s")
                    .unwrap();
                match chunk {
                    Some(c) => self.buf.extend_from_slice(&c),
                    None => {
                        assert!(self.buf.is_empty(), "a partial line at the end");
                        return None;
                    }
                }
            }
        }

        async fn event(&mut self) -> Value {
            self.next().await.expect("the watch ended")
        }
    }

    async fn list(api: &EndpointSlicesApi, selector: &str) -> Value {
        let resp = reqwest::Client::new()
            .get(format!("{}{PATH}?{selector}", api.url()))
            .bearer_auth(&api.token)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap()
    }

    #[tokio::test]
    async fn endpoint_slices_list_watch_bookmark_expire() {
        let api = EndpointSlicesApi::start().await;
        let client = reqwest::Client::new();

        // No token, a wrong one: 401. Another path: 404.
        let resp = client
            .get(format!("{}{PATH}?{ESCAPED}", api.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401);
        let body: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
        assert_eq!(body["reason"], "Unauthorized");
        assert_eq!(body["code"], 401);
        let resp = client
            .get(format!("{}{PATH}?{ESCAPED}&watch=1", api.url()))
            .bearer_auth("not-the-token")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401);
        let resp = client
            .get(format!("{}/api/v1/namespaces/shoal/endpoints", api.url()))
            .bearer_auth(&api.token)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404);
        assert_eq!(api.lists(), 0);
        assert_eq!(api.watches(), 0);

        // Empty, then one slice (the selector unescaped too).
        let l = list(&api, ESCAPED).await;
        assert_eq!(l["kind"], "EndpointSliceList");
        assert_eq!(l["apiVersion"], "discovery.k8s.io/v1");
        assert_eq!(l["metadata"]["resourceVersion"], "0");
        assert_eq!(l["items"], json!([]));
        api.set_slice(
            "shoal",
            "cache",
            "cache-abc",
            "s3",
            9000,
            &[endpoint("127.0.0.5", true, Some("zone-a"))],
        );
        api.set_slice("shoal", "other", "other-x", "s3", 9000, &[]);
        api.set_slice("elsewhere", "cache", "cache-zzz", "s3", 9000, &[]);
        let l = list(&api, PLAIN).await;
        assert_eq!(l["metadata"]["resourceVersion"], "3");
        assert_eq!(
            l["items"],
            json!([{
                "kind": "EndpointSlice",
                "apiVersion": "discovery.k8s.io/v1",
                "metadata": {
                    "name": "cache-abc",
                    "namespace": "shoal",
                    "resourceVersion": "1",
                    "labels": {"kubernetes.io/service-name": "cache"},
                },
                "addressType": "IPv4",
                "endpoints": [{
                    "addresses": ["127.0.0.5"],
                    "conditions": {"ready": true, "serving": true, "terminating": false},
                    "zone": "zone-a",
                }],
                "ports": [{"name": "s3", "port": 9000, "protocol": "TCP"}],
            }])
        );
        assert_eq!(api.lists(), 2);

        // A watch from the listed version: the changes after it, in order,
        // only this namespace's and service's.
        let mut w = Watch::open(&api, "resourceVersion=3").await;
        assert_eq!(api.watches(), 1);
        api.set_slice("shoal", "other", "other-x", "s3", 9000, &[]);
        api.set_slice(
            "shoal",
            "cache",
            "cache-def",
            "s3",
            9000,
            &[endpoint("127.0.0.6", false, None)],
        );
        api.set_slice(
            "shoal",
            "cache",
            "cache-abc",
            "s3",
            9001,
            &[endpoint("127.0.0.5", false, Some("zone-b"))],
        );
        api.delete_slice("shoal", "cache-abc");
        let e = w.event().await;
        assert_eq!(e["type"], "ADDED");
        assert_eq!(e["object"]["metadata"]["name"], "cache-def");
        assert_eq!(e["object"]["metadata"]["resourceVersion"], "5");
        let ep = &e["object"]["endpoints"][0];
        assert_eq!(ep["conditions"]["ready"], false);
        assert!(ep.get("zone").is_none(), "{ep}");
        let e = w.event().await;
        assert_eq!(e["type"], "MODIFIED");
        assert_eq!(e["object"]["metadata"]["name"], "cache-abc");
        assert_eq!(e["object"]["metadata"]["resourceVersion"], "6");
        assert_eq!(e["object"]["ports"][0]["port"], 9001);
        assert_eq!(e["object"]["endpoints"][0]["zone"], "zone-b");
        let e = w.event().await;
        assert_eq!(e["type"], "DELETED");
        assert_eq!(e["object"]["metadata"]["name"], "cache-abc");
        assert_eq!(e["object"]["metadata"]["resourceVersion"], "7");
        assert_eq!(e["object"]["ports"][0]["port"], 9001);

        // A second watch from the same version gets them replayed, then
        // bookmarks with the current version, and ends after its timeout.
        let mut again = Watch::open(
            &api,
            "resourceVersion=3&allowWatchBookmarks=true&timeoutSeconds=2",
        )
        .await;
        let kinds = [
            again.event().await["type"].clone(),
            again.event().await["type"].clone(),
            again.event().await["type"].clone(),
        ];
        assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED"]);
        let b = again.event().await;
        assert_eq!(b["type"], "BOOKMARK");
        assert_eq!(b["object"]["kind"], "EndpointSlice");
        assert_eq!(b["object"]["apiVersion"], "discovery.k8s.io/v1");
        assert_eq!(b["object"]["metadata"]["resourceVersion"], "7");
        let started = Instant::now();
        while let Some(e) = again.next().await {
            assert_eq!(e["type"], "BOOKMARK");
        }
        assert!(started.elapsed() < Duration::from_secs(5));

        // expire(): the open watch ends; one from any version handed out before
        // it (the last one, 7, too) gets 410 and ends, as does one from a version
        // that is no number; one from now goes on.
        api.expire();
        assert!(w.next().await.is_none(), "the open watch went on");
        let expired = json!({
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "reason": "Expired",
                "code": 410,
                "message": "too old resource version",
            },
        });
        for from in [
            "resourceVersion=3",
            "resourceVersion=7",
            "resourceVersion=x",
        ] {
            let mut old = Watch::open(&api, &format!("{from}&allowWatchBookmarks=true")).await;
            assert_eq!(old.event().await, expired);
            assert!(old.next().await.is_none());
        }
        // The expiry moved the version past every one handed out (7): 8 is now.
        let mut now = Watch::open(&api, "resourceVersion=8").await;
        api.set_slice("shoal", "cache", "cache-def", "s3", 9000, &[]);
        let e = now.event().await;
        assert_eq!(e["type"], "MODIFIED");
        assert_eq!(e["object"]["metadata"]["resourceVersion"], "9");
        assert_eq!(api.watches(), 6);
        assert_eq!(api.lists(), 2);

        // A watcher whose client went away is dropped (at a change after its
        // task has seen the response go).
        drop(now);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            api.set_slice("shoal", "cache", "cache-def", "s3", 9000, &[]);
            if api.store.lock().unwrap().watchers.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the gone client's watcher stayed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
