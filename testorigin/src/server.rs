//! The origin's HTTP server: accept loop, fault layer, and the `/_origin/` admin API.
//!
//! Every accepted socket gets `TCP_NODELAY`: without it a small GET response waits
//! on Nagle's algorithm and the client's delayed ACK, about 40 ms each time, which
//! would swamp every latency figure measured against this origin.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::faults::{roll, FaultSettings, Faults, RequestKind, Stats};
use crate::policy::Policy;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
type RespBody = BoxBody<Bytes, BoxError>;

/// What every connection shares.
pub struct Shared {
    pub s3: s3s::service::S3Service,
    pub faults: Arc<Faults>,
    pub stats: Arc<Stats>,
    pub policy: Policy,
}

/// Serves connections from `listener` until `shutdown` completes; open connections
/// are dropped then.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: impl Future<Output = ()>,
) {
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => {
                let (sock, _) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let _ = sock.set_nodelay(true);
                let shared = shared.clone();
                let tls = tls.clone();
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(move |req| handle(shared.clone(), req));
                    let mut http = hyper::server::conn::http1::Builder::new();
                    match tls {
                        None => {
                            let _ = http.keep_alive(true).serve_connection(TokioIo::new(sock), svc).await;
                        }
                        Some(acceptor) => {
                            let Ok(Ok(stream)) =
                                tokio::time::timeout(Duration::from_secs(10), acceptor.accept(sock)).await
                            else {
                                return;
                            };
                            let _ = http.keep_alive(true).serve_connection(TokioIo::new(stream), svc).await;
                        }
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, Infallible> {
    if req.uri().path().starts_with("/_origin/") {
        return Ok(admin(&shared, req).await);
    }
    let kind = request_kind(&req);
    let is_get = kind.method == "GET";
    let kind_is_head = kind.method == "HEAD";
    let kind_bucket = kind.bucket.clone();
    shared.stats.record(kind);

    let f = shared.faults.get();
    if shared.faults.take_fail() || roll(f.slowdown_per_mille) || shared.faults.over_rate() {
        shared.stats.record_throttled();
        return Ok(xml_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "SlowDown",
            "Please reduce your request rate.",
        ));
    }
    if roll(f.error_per_mille) {
        return Ok(xml_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "We encountered an internal error. Please try again.",
        ));
    }
    let delay = shared.faults.first_byte_delay();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let query = req.uri().query().unwrap_or("").to_owned();
    if let Some(r) = shared.policy.check(&kind_bucket, req.headers(), &query) {
        let mut resp = if kind_is_head {
            full(r.status, "application/xml", Bytes::new())
        } else {
            let region = r
                .region
                .as_ref()
                .map(|g| format!("<Region>{g}</Region>"))
                .unwrap_or_default();
            full(
                r.status,
                "application/xml",
                format!(
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{}</Code><Message>{}</Message>{region}</Error>",
                    r.code, r.message
                ),
            )
        };
        if let Some(g) = r.region {
            resp.headers_mut()
                .insert("x-amz-bucket-region", g.parse().expect("a region name"));
        }
        return Ok(resp);
    }

    let resp = match hyper::service::Service::call(&shared.s3, req).await {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("s3 service error: {e:?}");
            return Ok(xml_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                "internal error",
            ));
        }
    };
    let (mut parts, body) = resp.into_parts();
    // s3s answers every HEAD with 200; S3 answers a HEAD of a range as its GET, 206.
    if kind_is_head
        && parts.status == StatusCode::OK
        && parts.headers.contains_key(http::header::CONTENT_RANGE)
    {
        parts.status = StatusCode::PARTIAL_CONTENT;
    }
    let len: u64 = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0);
    let cut = is_get
        && len > 0
        && parts.status.is_success()
        && (roll(f.reset_per_mille) || shared.faults.take_reset());
    let cut_at = cut.then_some(if f.reset_after_bytes == 0 || f.reset_after_bytes >= len {
        len / 2
    } else {
        f.reset_after_bytes
    });
    let body = paced(
        body,
        f.bandwidth_bytes_per_sec,
        cut_at,
        shared.stats.clone(),
    );
    Ok(Response::from_parts(parts, body))
}

/// Counts each body byte, paces the body to `bandwidth` bytes/s, and cuts it off
/// after `cut_at` bytes by ending the stream with an error, which makes hyper drop
/// the connection mid-body: what a reset looks like to a client.
fn paced(body: s3s::Body, bandwidth: u64, cut_at: Option<u64>, stats: Arc<Stats>) -> RespBody {
    struct St {
        body: s3s::Body,
        sent: u64,
        start: Instant,
        cut: bool,
        done: bool,
    }
    let st = St {
        body,
        sent: 0,
        start: Instant::now(),
        cut: false,
        done: false,
    };
    let stream = futures_util::stream::unfold(st, move |mut st| {
        let stats = stats.clone();
        async move {
            if st.done {
                return None;
            }
            if st.cut {
                st.done = true;
                // Let what precedes the cut (headers included) reach the wire
                // first: a reset mid-body, not a connection closed before the
                // answer.
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                let err: BoxError = "fault mode: connection reset mid-body".into();
                return Some((Err(err), st));
            }
            let mut chunk = match st.body.next().await? {
                Ok(c) => c,
                Err(e) => return Some((Err(e), st)),
            };
            if let Some(cut) = cut_at {
                if st.sent + chunk.len() as u64 >= cut {
                    st.cut = true;
                    let keep = (cut - st.sent) as usize;
                    chunk.truncate(keep);
                    stats.add_body_bytes(keep as u64);
                    // Send what precedes the cut; the next poll fails the body.
                    return Some((Ok(chunk), st));
                }
            }
            st.sent += chunk.len() as u64;
            stats.add_body_bytes(chunk.len() as u64);
            if bandwidth > 0 {
                let due = st.start + Duration::from_secs_f64(st.sent as f64 / bandwidth as f64);
                tokio::time::sleep_until(due.into()).await;
            }
            Some((Ok(chunk), st))
        }
    });
    BoxBody::new(StreamBody::new(stream.map_ok(Frame::data)))
}

fn request_kind(req: &Request<Incoming>) -> RequestKind {
    let path = req.uri().path().trim_start_matches('/');
    let (bucket, key) = path.split_once('/').unwrap_or((path, ""));
    let decode = |s: &str| percent_decode(s);
    RequestKind {
        method: req.method().as_str().to_owned(),
        bucket: decode(bucket),
        key: decode(key),
        range: req
            .headers()
            .get(http::header::RANGE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    }
}

fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<RespBody> {
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(Full::new(body.into()).map_err(|e| match e {}).boxed())
        .unwrap()
}

fn xml_error(status: StatusCode, code: &str, message: &str) -> Response<RespBody> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    );
    full(status, "application/xml", body)
}

async fn admin(shared: &Shared, req: Request<Incoming>) -> Response<RespBody> {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    match (method, path.as_str()) {
        (Method::GET, "/_origin/stats") => {
            let snap = shared.stats.snapshot();
            full(
                StatusCode::OK,
                "application/json",
                serde_json::to_vec(&snap).unwrap(),
            )
        }
        (Method::POST, "/_origin/stats/reset") => {
            shared.stats.reset();
            full(StatusCode::OK, "application/json", "{}")
        }
        (Method::GET, "/_origin/faults") => full(
            StatusCode::OK,
            "application/json",
            serde_json::to_vec(&shared.faults.get()).unwrap(),
        ),
        (Method::PUT, "/_origin/faults") => {
            let body = match req.into_body().collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => {
                    return full(
                        StatusCode::BAD_REQUEST,
                        "text/plain",
                        format!("bad body: {e}"),
                    )
                }
            };
            match serde_json::from_slice::<FaultSettings>(&body) {
                Ok(s) => {
                    shared.faults.set(s);
                    full(
                        StatusCode::OK,
                        "application/json",
                        serde_json::to_vec(&s).unwrap(),
                    )
                }
                Err(e) => full(
                    StatusCode::BAD_REQUEST,
                    "text/plain",
                    format!("bad fault settings: {e}\n"),
                ),
            }
        }
        _ => full(StatusCode::NOT_FOUND, "text/plain", "unknown admin path\n"),
    }
}
