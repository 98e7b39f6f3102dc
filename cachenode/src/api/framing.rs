//! A request body sent in HTTP chunks with no length (`Transfer-Encoding:
//! chunked`, which S3 and other S3 servers take for a PUT): held whole, up to
//! [`MAX_HELD`](super::writes::MAX_HELD), and given its length, since the S3
//! layer checks a body's signature or hash only against a known length. Longer
//! ones go on as they came and are refused there (411 `MissingContentLength`).
//! aws-chunked bodies name their length in `x-amz-decoded-content-length` and
//! pass as they are.

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::writes::MAX_HELD;

/// Whether `req` is a body in HTTP chunks that names no length of its own.
fn lengthless(req: &http::Request<Incoming>) -> bool {
    let h = req.headers();
    let chunked = h
        .get(http::header::TRANSFER_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    let streaming = h
        .get("x-amz-content-sha256")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("STREAMING-"));
    chunked && !streaming && !h.contains_key(http::header::CONTENT_LENGTH)
}

/// `req` for the S3 layer, an unsized body held and sized.
pub async fn sized(req: http::Request<Incoming>) -> http::Request<s3s::Body> {
    if !lengthless(&req) {
        return req.map(s3s::Body::from);
    }
    let (mut parts, body) = req.into_parts();
    let mut stream = body.into_data_stream();
    let mut held = BytesMut::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(c) if held.len() + c.len() <= MAX_HELD => held.extend_from_slice(&c),
            // Too long to hold, or cut off: what came, then the rest as it comes,
            // still without a length.
            next => {
                let first = futures_util::stream::iter([
                    Ok::<Bytes, std::io::Error>(held.freeze()),
                    next.map_err(std::io::Error::other),
                ]);
                let rest = stream.map(|c| c.map_err(std::io::Error::other));
                let all = crate::node::SyncStream::new(first.chain(rest));
                let body = s3s::Body::from(s3s::dto::StreamingBlob::wrap(all));
                return http::Request::from_parts(parts, body);
            }
        }
    }
    parts.headers.insert(
        http::header::CONTENT_LENGTH,
        http::HeaderValue::from(held.len()),
    );
    http::Request::from_parts(parts, s3s::Body::from(held.freeze()))
}
