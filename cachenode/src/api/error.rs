//! Errors as a client of the node sees them: the one place the node's errors become
//! S3 error codes and statuses.

use s3s::{s3_error, S3ErrorCode};
use shoal::cluster::ReadError;
use shoal::store::StoreError;

use crate::node::NodeError;

/// The S3 code and HTTP status a store error is answered with: what the origin
/// said about the object is passed on; a failure to reach it is a 503.
pub fn code_and_status(e: &StoreError) -> (&str, u16) {
    match e.cause() {
        StoreError::NoSuchKey { .. } => ("NoSuchKey", 404),
        StoreError::NoSuchBucket { .. } => ("NoSuchBucket", 404),
        StoreError::PreconditionFailed { .. } => ("PreconditionFailed", 412),
        StoreError::NotModified { .. } => ("NotModified", 304),
        StoreError::InvalidRange { .. } => ("InvalidRange", 416),
        StoreError::AccessDenied { .. } => ("AccessDenied", 403),
        StoreError::Archived { .. } => ("InvalidObjectState", 403),
        // The node's own credentials or region, not the client's request.
        StoreError::Credentials { .. }
        | StoreError::ExpiredToken { .. }
        | StoreError::WrongRegion { .. } => ("ServiceUnavailable", 503),
        StoreError::Throttled { .. } => ("SlowDown", 503),
        StoreError::InvalidKey { .. } => ("InvalidArgument", 400),
        StoreError::BadRequest { code, status, .. } => (code, *status),
        StoreError::Server { .. }
        | StoreError::Connect { .. }
        | StoreError::Transport { .. }
        | StoreError::Timeout { .. }
        | StoreError::Protocol { .. }
        | StoreError::ShortBody { .. }
        | StoreError::Exhausted { .. } => ("ServiceUnavailable", 503),
    }
}

fn with(code: &str, status: u16, message: String) -> s3s::S3Error {
    let code = S3ErrorCode::from_bytes(code.as_bytes()).unwrap_or(S3ErrorCode::InternalError);
    let mut err = s3s::S3Error::with_message(code, message);
    if let Ok(status) = http::StatusCode::from_u16(status) {
        err.set_status_code(status);
    }
    err
}

/// A store's error as the S3 error a client gets.
pub fn store_error(e: StoreError) -> s3s::S3Error {
    let (code, status) = code_and_status(&e);
    if !e.is_answer() {
        tracing::warn!("answering {status}: {e}");
    }
    with(code, status, e.to_string())
}

/// The read path's error as the S3 error a client gets.
pub fn node_error(e: NodeError) -> s3s::S3Error {
    match e {
        NodeError::Origin(e) | NodeError::Cluster(ReadError::Store(e)) => store_error(e),
        NodeError::Cluster(ReadError::Stale { .. }) => {
            with("PreconditionFailed", 412, e.to_string())
        }
        // Held when the request was let in, gone before it was read.
        NodeError::NotCached => not_cached_with(http::StatusCode::GATEWAY_TIMEOUT),
        other => {
            tracing::warn!("answering 503: {other}");
            with("ServiceUnavailable", 503, other.to_string())
        }
    }
}

/// Whether a request asks for the cache only: `Cache-Control: only-if-cached`
/// (RFC 9111 5.2.1.7), or shoal's own `x-shoal-cached-only` (a hedge).
pub fn cached_only(headers: &http::HeaderMap) -> bool {
    headers.contains_key(shoal::node_proto::CACHED_ONLY_HEADER)
        || crate::node::only_if_cached(headers)
}

/// The answer to a cached-only request that would need the origin: code
/// `ShoalNotCached`, with status 504 to `Cache-Control: only-if-cached` (as RFC
/// 9111 has it) and 503 to `x-shoal-cached-only`.
pub fn not_cached(headers: &http::HeaderMap) -> s3s::S3Error {
    not_cached_with(if crate::node::only_if_cached(headers) {
        http::StatusCode::GATEWAY_TIMEOUT
    } else {
        http::StatusCode::SERVICE_UNAVAILABLE
    })
}

fn not_cached_with(status: http::StatusCode) -> s3s::S3Error {
    let mut e = s3s::S3Error::with_message(
        S3ErrorCode::Custom(shoal::node_proto::NOT_CACHED.into()),
        "not cached here (cached-only request)",
    );
    e.set_status_code(status);
    e
}

/// The answer to a write on a node that takes none.
pub fn read_only() -> s3s::S3Error {
    let mut e = s3s::S3Error::with_message(
        S3ErrorCode::MethodNotAllowed,
        "shoal-node serves reads only; write to the origin",
    );
    e.set_status_code(http::StatusCode::METHOD_NOT_ALLOWED);
    e
}

/// A key the node refuses before anything else (it cannot be addressed in a URL).
pub fn check_key(key: &str) -> s3s::S3Result<()> {
    match shoal::store::s3::key_problem(key) {
        Some(why) => Err(s3_error!(InvalidArgument, "invalid key: {why}")),
        None => Ok(()),
    }
}

/// A request the node's policy refused before it ran, as S3 answers it: out of
/// scope or unsigned is 403 `AccessDenied`, over a rate is 503 `SlowDown` (which
/// SDKs retry with back-off).
pub fn refusal(e: &crate::access::Refusal) -> s3s::S3Error {
    use crate::access::Refusal;
    let (code, message) = match e {
        Refusal::Anonymous => (S3ErrorCode::AccessDenied, "Access Denied".to_owned()),
        Refusal::OutOfScope { .. } => (S3ErrorCode::AccessDenied, format!("Access Denied: {e}")),
        Refusal::OverLimit { .. } => (
            S3ErrorCode::SlowDown,
            format!("Please reduce your request rate: {e}"),
        ),
    };
    s3s::S3Error::with_message(code, message)
}

/// The S3 code of a refusal, for the access log.
pub fn refusal_code(e: &crate::access::Refusal) -> &'static str {
    match e {
        crate::access::Refusal::OverLimit { .. } => "SlowDown",
        _ => "AccessDenied",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_pass_on_and_failures_are_503() {
        let gone = StoreError::NoSuchKey {
            bucket: "b".into(),
            key: "k".into(),
        };
        assert_eq!(code_and_status(&gone), ("NoSuchKey", 404));
        let slow = StoreError::Throttled {
            code: "SlowDown".into(),
            message: String::new(),
        };
        assert_eq!(code_and_status(&slow), ("SlowDown", 503));
        let wrapped = StoreError::Exhausted {
            attempts: 3,
            last: Box::new(StoreError::PreconditionFailed {
                bucket: "b".into(),
                key: "k".into(),
            }),
        };
        assert_eq!(code_and_status(&wrapped), ("PreconditionFailed", 412));
        let e = node_error(NodeError::Cluster(ReadError::Stale {
            bucket: "b".into(),
            key: "k".into(),
        }));
        assert_eq!(e.status_code(), Some(http::StatusCode::PRECONDITION_FAILED));
        let e = node_error(NodeError::WaitedTooLong(std::time::Duration::from_secs(1)));
        assert_eq!(e.status_code(), Some(http::StatusCode::SERVICE_UNAVAILABLE));
    }
}
