//! The node's HTTP server: accept loop (TCP or TLS), `/healthz` and `/metrics`, the
//! S3 service for everything else, and graceful shutdown.
//!
//! Shaped as `serve(listener, app, shutdown)` so a test binds `127.0.0.1:0` and
//! runs a node in process. On shutdown the listener closes at once and open
//! connections get `drain` to finish their responses.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::access::record::{Recorded, Start};
use crate::access::trace::{self, Trace};
use crate::connections::{Activity, Gate, Limits, Watched};
use crate::metrics::MethodStatus;
use crate::node::Node;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type RespBody = UnsyncBoxBody<Bytes, BoxError>;

/// Everything a connection needs.
pub struct App {
    pub node: Arc<Node>,
    pub s3: s3s::service::S3Service,
    pub registry: Registry,
    /// `auth.mode = "none"`: signatures are ignored and everyone may read.
    pub open: bool,
    pub limits: Limits,
    /// Who may do what, and each key's rates; `None` when authentication is off.
    pub policy: Option<Arc<crate::access::Policy>>,
    pub access_log: Option<Arc<crate::access::log::AccessLog>>,
    /// Base domains of virtual-hosted requests, to name a request's bucket.
    pub domains: Vec<String>,
}

pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    let graceful = GracefulShutdown::new();
    let gate = Gate::new(app.limits.max_connections);
    tokio::pin!(shutdown);
    loop {
        let (sock, peer) = tokio::select! {
            _ = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(admitted) = gate.admit(peer, &app.node.metrics) else {
            drop(sock);
            continue;
        };
        let _ = sock.set_nodelay(true);
        let activity = Activity::new();
        let io = Watched::new(sock, activity.clone());
        let app = app.clone();
        let tls = tls.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let limits = app.limits.clone();
            let metrics = app.node.metrics.clone();
            let served = async {
                match tls {
                    None => connection(app, peer, TokioIo::new(io), watcher).await,
                    Some(acceptor) => {
                        // The handshake is the first thing a client sends: it gets
                        // the headers' time.
                        let stream = match tokio::time::timeout(
                            limits.header_read_timeout,
                            acceptor.accept(io),
                        )
                        .await
                        {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, "TLS handshake failed: {e}");
                                return Ok(());
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "TLS handshake timed out");
                                return Err(TimedOut);
                            }
                        };
                        connection(app, peer, TokioIo::new(stream), watcher).await
                    }
                }
            };
            let ended = tokio::select! {
                r = served => r,
                _ = activity.idle(limits.idle_timeout) => Err(TimedOut),
            };
            if ended.is_err() {
                metrics.connections_timed_out.inc();
            }
            drop(admitted);
        });
    }
    drop(listener);
    if crate::handover::draining() {
        // Connections accepted a moment ago have their first request on the way:
        // read and answered (then closed), not closed as idle under it.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tracing::info!("shutting down: draining open connections for up to {drain:?}");
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("drain timed out; closing remaining connections");
    }
}

/// A connection closed for slow headers or idling.
struct TimedOut;

/// Serves HTTP/1.1 on one admitted connection until it closes.
async fn connection<I>(
    app: Arc<App>,
    peer: std::net::SocketAddr,
    io: TokioIo<I>,
    watcher: hyper_util::server::graceful::Watcher,
) -> Result<(), TimedOut>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(app.limits.header_read_timeout);
    let svc = hyper::service::service_fn(move |req| handle(app.clone(), peer, req));
    match watcher.watch(builder.serve_connection(io, svc)).await {
        Err(e) if e.is_timeout() => Err(TimedOut),
        _ => Ok(()),
    }
}

fn text(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<RespBody> {
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(
            Full::new(body.into())
                .map_err(|e| match e {})
                .boxed_unsync(),
        )
        .expect("static response")
}

async fn handle(
    app: Arc<App>,
    peer: std::net::SocketAddr,
    mut req: Request<Incoming>,
) -> Result<Response<RespBody>, Infallible> {
    let method = req.method().clone();
    let mut resp = match (&method, req.uri().path()) {
        (&Method::GET, "/healthz") => text(StatusCode::OK, "text/plain", "ok\n"),
        (&Method::GET, "/metrics") => {
            app.node.refresh_gauges();
            let accept = req
                .headers()
                .get(http::header::ACCEPT)
                .and_then(|v| v.to_str().ok());
            match shoal::exposition::render(&app.registry, accept) {
                Ok((content_type, body)) => text(StatusCode::OK, content_type, body),
                Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, "text/plain", e),
            }
        }
        _ => {
            if app.open {
                strip_signature(&mut req);
            }
            s3(&app, peer, req).await
        }
    };
    if crate::handover::draining() {
        // A client reusing this connection after the answer would race its close.
        resp.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
    app.node
        .metrics
        .requests
        .get_or_create(&MethodStatus {
            method: method.as_str().to_owned(),
            status: resp.status().as_u16(),
        })
        .inc();
    Ok(resp)
}

/// An S3 request, under its trace, recorded (key rates, access log) as its
/// answer goes out.
async fn s3(
    app: &Arc<App>,
    peer: std::net::SocketAddr,
    req: Request<Incoming>,
) -> Response<RespBody> {
    let method = req.method().clone();
    // Answers are recorded for the access log and for keys charged by the byte.
    let recording =
        app.access_log.is_some() || app.policy.as_ref().is_some_and(|p| p.charges_any());
    let start = recording.then(|| {
        let (bucket, key) =
            crate::api::passthrough::address(req.uri(), req.headers(), &app.domains)
                .unwrap_or_default();
        Start {
            at: std::time::Instant::now(),
            client: peer.to_string(),
            method: method.as_str().to_owned(),
            bucket,
            key,
            range: req
                .headers()
                .get(http::header::RANGE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        }
    });
    let trace = Arc::new(Trace::default());
    let answered = trace::scope(Some(trace.clone()), async {
        app.s3.call(crate::api::framing::sized(req).await).await
    })
    .await;
    let resp = match answered {
        Ok(r) => partial_head(&method, r.map(|b| b.boxed_unsync())),
        Err(e) => {
            tracing::error!("S3 service error: {e:?}");
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain",
                "internal error\n",
            )
        }
    };
    let Some(start) = start else {
        return resp;
    };
    let status = resp.status().as_u16();
    resp.map(|b| {
        Recorded::new(
            b,
            trace,
            app.policy.clone(),
            app.access_log.clone(),
            start,
            status,
        )
        .boxed_unsync()
    })
}

/// s3s answers every HEAD with 200; S3 answers a HEAD of a range as its GET, 206.
pub fn partial_head<B>(method: &Method, mut resp: Response<B>) -> Response<B> {
    if method == Method::HEAD
        && resp.status() == StatusCode::OK
        && resp.headers().contains_key(http::header::CONTENT_RANGE)
    {
        *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
    }
    resp
}

/// With authentication off, a signed request is read as an anonymous one.
fn strip_signature(req: &mut Request<Incoming>) {
    req.headers_mut().remove(http::header::AUTHORIZATION);
    let Some(q) = req.uri().query() else { return };
    if !q.contains("X-Amz-") {
        return;
    }
    let kept: Vec<&str> = q
        .split('&')
        .filter(|kv| !kv.starts_with("X-Amz-"))
        .collect();
    let pq = if kept.is_empty() {
        req.uri().path().to_owned()
    } else {
        format!("{}?{}", req.uri().path(), kept.join("&"))
    };
    let mut parts = req.uri().clone().into_parts();
    if let Ok(pq) = pq.parse() {
        parts.path_and_query = Some(pq);
        if let Ok(uri) = http::Uri::from_parts(parts) {
            *req.uri_mut() = uri;
        }
    }
}
