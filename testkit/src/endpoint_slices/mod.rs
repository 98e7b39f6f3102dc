//! The Kubernetes API's EndpointSlice list and watch (`discovery.k8s.io/v1`), on
//! loopback, for what follows a Service's endpoints: `GET
//! /apis/discovery.k8s.io/v1/namespaces/NS/endpointslices?labelSelector=kubernetes.io/service-name=SVC`
//! lists a Service's slices with the store's resourceVersion; the same with
//! `watch=1&resourceVersion=R` streams (chunked, one JSON event a line) every
//! change after `R`, then the live ones, with bookmarks when asked for and an
//! end after `timeoutSeconds`. [`EndpointSlicesApi::expire`] forgets the
//! history and ends the open watches, as an API server restart does: a watch
//! from before it then gets the 410 `Expired` event. Requests must carry the
//! bearer token, as the API server wants. Objects are written as the API
//! server's Go encoding writes them (see [`object`]): a slice with no endpoint
//! has `"endpoints": null`, an unset field is left out.

mod http;
mod object;
mod stream;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::sync::mpsc;

pub use object::{Conditions, SliceEndpoint, SlicePort};
use object::{Slice, SERVICE_LABEL};

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
                        let resp = http::answer(&s, &t, &req);
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
    /// number `port`, holding `endpoints` (none: `"endpoints": null`, as the
    /// API sends it). See [`EndpointSlicesApi::set_slice_ports`].
    pub fn set_slice(
        &self,
        namespace: &str,
        service: &str,
        name: &str,
        port_name: &str,
        port: u16,
        endpoints: &[SliceEndpoint],
    ) {
        let port = SlicePort {
            name: Some(port_name.to_owned()),
            port: Some(port),
        };
        self.set_slice_ports(namespace, service, name, &[port], endpoints);
    }

    /// The slice the EndpointSlice controller leaves for a Service whose last
    /// endpoint went (its placeholder, written over the slice it had): no
    /// endpoints and no ports, both `null` on the wire.
    pub fn placeholder(&self, namespace: &str, service: &str, name: &str) {
        self.set_slice_ports(namespace, service, name, &[], &[]);
    }

    /// Creates or replaces slice `name` with `ports` and `endpoints`. Bumps the
    /// store's resourceVersion; watchers of that namespace and service get
    /// ADDED (new) or MODIFIED. A slice moved to another service is DELETED
    /// for the old one's watchers and ADDED for the new one's, as a label
    /// selector's watch sees it.
    pub fn set_slice_ports(
        &self,
        namespace: &str,
        service: &str,
        name: &str,
        ports: &[SlicePort],
        endpoints: &[SliceEndpoint],
    ) {
        let mut s = self.store.lock().unwrap();
        s.version += 1;
        let version = s.version;
        let slice = Slice {
            service: service.to_owned(),
            ports: ports.to_vec(),
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
