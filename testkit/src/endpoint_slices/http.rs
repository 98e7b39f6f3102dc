//! The API's answers: the token checked, a list, or a watch started (its body
//! fed by [`super::stream`]).

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::stream::{respond, Body};
use super::{event_line, Store, Watcher, SERVICE_LABEL};

/// What a watch from a forgotten resourceVersion gets, before its end.
const EXPIRED: &str = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version","reason":"Expired","code":410}}"#;

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

pub(super) fn answer(
    store: &Arc<Mutex<Store>>,
    token: &str,
    req: &Request<Incoming>,
) -> Response<Body> {
    let bearer = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if bearer != Some(token) {
        return status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized");
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
