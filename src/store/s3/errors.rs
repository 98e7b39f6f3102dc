//! S3's error answers (HTTP status, and the code and message of the XML body) as
//! [`StoreError`]s: the one place they are mapped.

use std::time::Duration;

use http::{HeaderMap, StatusCode};

use super::{xml, S3Client};
use crate::aws::endpoint::bucket_region;
use crate::store::{Deadline, StoreError};

/// What a request was about, for error messages: its bucket (`""` for the
/// service), key, `Range`, and whether it was a HEAD (whose error answers come
/// with no body to name their code).
pub(crate) struct ErrorContext<'a> {
    pub bucket: &'a str,
    pub key: &'a str,
    pub range: Option<&'a str>,
    pub head: bool,
}

/// Maps an error response. `code`/`message` come from the XML body when there is one
/// (HEAD responses have none).
pub(crate) fn from_response(
    status: u16,
    code: Option<String>,
    message: Option<String>,
    ctx: &ErrorContext<'_>,
) -> StoreError {
    let bucket = ctx.bucket.to_owned();
    let key = ctx.key.to_owned();
    let code_s = code.clone().unwrap_or_default();
    let message = message.unwrap_or_else(|| default_message(status).to_owned());
    match (status, code_s.as_str()) {
        (_, "NoSuchBucket") => StoreError::NoSuchBucket { bucket },
        (_, "ExpiredToken" | "InvalidToken" | "TokenRefreshRequired") => StoreError::ExpiredToken {
            code: code_s,
            message,
        },
        (_, "InvalidObjectState") => StoreError::Archived {
            bucket,
            key,
            message,
        },
        (_, "NoSuchKey") => StoreError::NoSuchKey { bucket, key },
        (404, _) if ctx.key.is_empty() => StoreError::NoSuchBucket { bucket },
        (404, _) => StoreError::NoSuchKey { bucket, key },
        (412, _) | (_, "PreconditionFailed") => StoreError::PreconditionFailed { bucket, key },
        (304, _) => StoreError::NotModified { bucket, key },
        (416, _) | (_, "InvalidRange") => StoreError::InvalidRange {
            bucket,
            key,
            range: ctx.range.unwrap_or("the range").to_owned(),
        },
        (403, _) => StoreError::AccessDenied {
            message: if code_s.is_empty() || code_s == "AccessDenied" {
                message
            } else {
                format!("{code_s}: {message}")
            },
        },
        // A 503 without a code is a HEAD's `SlowDown`: its answer has no body.
        (429 | 503, "")
        | (_, "SlowDown" | "Throttling" | "ThrottlingException" | "RequestLimitExceeded") => {
            StoreError::Throttled {
                code: if code_s.is_empty() {
                    default_message(status).replace(' ', "")
                } else {
                    code_s
                },
                message,
            }
        }
        (500..=599, _) => StoreError::Server {
            status,
            code: if code_s.is_empty() {
                default_message(status).replace(' ', "")
            } else {
                code_s
            },
            message,
        },
        _ => StoreError::BadRequest {
            status,
            code: if code_s.is_empty() {
                format!("Http{status}")
            } else {
                code_s
            },
            message,
        },
    }
}

fn default_message(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "no message",
    }
}

/// A request that got no answer: the transport's whole chain of causes, with a
/// hint when the cause is an untrusted certificate.
pub(super) fn transport_error(
    endpoint: &str,
    e: &reqwest::Error,
    connect_timeout: Duration,
) -> StoreError {
    // reqwest wraps the root cause; show all of it.
    let mut message = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        message.push_str(": ");
        message.push_str(&s.to_string());
        src = s.source();
    }
    if message.contains("UnknownIssuer") || message.contains("invalid peer certificate") {
        message.push_str(
            " (the server's certificate is not from a trusted CA: name its CA in ca_bundle \
             ([origin] or [cluster]) or AWS_CA_BUNDLE)",
        );
    }
    if e.is_connect() && e.is_timeout() {
        StoreError::Timeout {
            endpoint: endpoint.to_owned(),
            deadline: Deadline::Connect,
            after: connect_timeout,
        }
    } else if e.is_connect() {
        StoreError::Connect {
            endpoint: endpoint.to_owned(),
            message,
        }
    } else {
        StoreError::Transport {
            endpoint: endpoint.to_owned(),
            message,
        }
    }
}

impl S3Client {
    pub(super) fn first_byte_timeout(&self, after: std::time::Duration) -> StoreError {
        StoreError::Timeout {
            endpoint: self.inner.label.clone(),
            deadline: Deadline::FirstByte,
            after,
        }
    }

    /// What an error answer (`status`, its head and small body) to the
    /// request `call` describes means.
    pub(super) fn error_answer(
        &self,
        call: &ErrorContext<'_>,
        status: StatusCode,
        headers: &HeaderMap,
        body: &[u8],
    ) -> StoreError {
        let parsed = xml::parse_error(body);
        if let Some(e) = self.wrong_region(call, status, headers, parsed.code.as_deref(), body) {
            return e;
        }
        let refreshable = self.inner.creds.as_ref().is_some_and(|c| c.refreshes());
        if call.head && status == StatusCode::BAD_REQUEST && refreshable {
            // A HEAD has no error body to name ExpiredToken by, and S3 answers an
            // expired token with a bare 400: worth one refresh.
            return StoreError::ExpiredToken {
                code: "Http400".into(),
                message: "a HEAD answered 400 with no body, as for an expired token".into(),
            };
        }
        from_answer(status.as_u16(), parsed.code, parsed.message, call)
    }

    /// A refusal that may be the bucket's requester-pays setting says so.
    pub(super) fn with_hint(&self, mut e: StoreError, call: &ErrorContext<'_>) -> StoreError {
        let inner = &*self.inner;
        if let StoreError::AccessDenied { message } = &mut e {
            if !inner.opts.request.requester_pays
                && !call.bucket.is_empty()
                && inner.creds.is_some()
            {
                message.push_str(
                    " (if the bucket is requester-pays, set origin.requester_pays = true)",
                );
            }
        }
        e
    }

    /// A 301, or a 400 naming another region, for a bucket signed for this one.
    fn wrong_region(
        &self,
        call: &ErrorContext<'_>,
        status: StatusCode,
        headers: &HeaderMap,
        code: Option<&str>,
        body: &[u8],
    ) -> Option<StoreError> {
        let about_region = status == StatusCode::MOVED_PERMANENTLY
            || matches!(
                code,
                Some(
                    "AuthorizationHeaderMalformed"
                        | "PermanentRedirect"
                        | "IllegalLocationConstraintException"
                )
            )
            || (status == StatusCode::BAD_REQUEST && headers.contains_key("x-amz-bucket-region"));
        if !about_region || call.bucket.is_empty() {
            return None;
        }
        let signed_for = self.region_of(call.bucket);
        let region = bucket_region(headers, body).filter(|r| *r != signed_for)?;
        Some(StoreError::WrongRegion {
            bucket: call.bucket.to_owned(),
            region,
            signed_for,
        })
    }
}

/// What an error answer with `status` and a body naming `code` and `message`
/// means: [`from_response`], but a body naming an answer about the object
/// under another status (a 500 saying NoSuchKey) is not one: the status is
/// the answer, and the code only part of its message.
pub(crate) fn from_answer(
    status: u16,
    code: Option<String>,
    message: Option<String>,
    ctx: &ErrorContext<'_>,
) -> StoreError {
    let e = from_response(status, code.clone(), message, ctx);
    if status_agrees(&e, status) {
        return e;
    }
    let message = format!("{}: {e}", code.unwrap_or_default());
    from_response(status, None, Some(message), ctx)
}

/// Whether an answer about the object (which is never failed over: the next
/// node or the origin would say the same) came with the status that says it.
/// Anything else, a server error above all, is the answering server's failure.
fn status_agrees(e: &StoreError, status: u16) -> bool {
    match e {
        StoreError::NoSuchKey { .. } | StoreError::NoSuchBucket { .. } => status == 404,
        StoreError::PreconditionFailed { .. } => status == 412,
        StoreError::NotModified { .. } => status == 304,
        StoreError::InvalidRange { .. } => status == 416,
        _ => true,
    }
}

/// An error status a passed-through request may owe to this client's own
/// credentials or region, which it must handle rather than pass on.
pub(super) fn may_be_ours(status: StatusCode) -> bool {
    matches!(status.as_u16(), 301 | 400 | 403)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> ErrorContext<'static> {
        ErrorContext {
            bucket: "b",
            key: "k",
            range: Some("bytes=10-20"),
            head: false,
        }
    }

    #[test]
    fn maps_codes() {
        let e = from_response(404, Some("NoSuchKey".into()), None, &ctx());
        assert_eq!(
            e,
            StoreError::NoSuchKey {
                bucket: "b".into(),
                key: "k".into()
            }
        );
        assert!(e.is_answer() && !e.is_retryable());
        let e = from_response(
            503,
            Some("SlowDown".into()),
            Some("Please reduce".into()),
            &ctx(),
        );
        assert!(matches!(e, StoreError::Throttled { .. }) && e.is_retryable());
        assert!(matches!(&e, StoreError::Throttled { code, .. } if code == "SlowDown"));
        let e = from_response(
            403,
            Some("SignatureDoesNotMatch".into()),
            Some("bad sig".into()),
            &ctx(),
        );
        assert_eq!(
            e.to_string(),
            "AccessDenied: SignatureDoesNotMatch: bad sig"
        );
        let e = from_response(416, None, None, &ctx());
        assert!(e.to_string().contains("bytes=10-20"));
        let e = from_response(500, None, None, &ctx());
        assert!(matches!(e, StoreError::Server { status: 500, .. }));
        let wrapped = StoreError::Exhausted {
            attempts: 3,
            last: Box::new(e.clone()),
        };
        assert_eq!(wrapped.cause(), &e);
        assert!(wrapped.to_string().contains("after 3 attempts"));
    }

    #[test]
    fn a_code_naming_an_answer_under_another_status_is_the_status_failure() {
        let answer = |status, code: &str| from_answer(status, Some(code.into()), None, &ctx());
        // What a broken node or origin may send: failed over, never final.
        let e = answer(500, "NoSuchKey");
        assert!(matches!(e, StoreError::Server { status: 500, .. }), "{e:?}");
        assert!(!e.is_answer() && e.is_retryable());
        assert!(e.to_string().contains("NoSuchKey"), "{e}");
        for (status, code) in [
            (503, "PreconditionFailed"),
            (400, "InvalidRange"),
            (200, "NoSuchBucket"),
        ] {
            let e = answer(status, code);
            assert!(!e.is_answer(), "{status} {code}: {e:?}");
        }
        // Under their own statuses they are answers, and throttling keeps its code.
        assert!(matches!(
            answer(404, "NoSuchKey"),
            StoreError::NoSuchKey { .. }
        ));
        assert!(matches!(
            answer(412, "PreconditionFailed"),
            StoreError::PreconditionFailed { .. }
        ));
        assert!(matches!(
            answer(416, "InvalidRange"),
            StoreError::InvalidRange { .. }
        ));
        assert!(matches!(
            answer(503, "SlowDown"),
            StoreError::Throttled { .. }
        ));
        assert!(matches!(
            from_answer(503, None, None, &ctx()),
            StoreError::Throttled { .. }
        ));
        assert!(matches!(
            answer(503, "ServiceUnavailable"),
            StoreError::Server { .. }
        ));
        assert!(matches!(
            from_answer(404, None, None, &ctx()),
            StoreError::NoSuchKey { .. }
        ));
    }
}
