//! S3 errors as types, mapped from HTTP status and S3's XML error codes in one place
//! ([`S3Error::from_response`]).

use std::time::Duration;

/// Which deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    Connect,
    FirstByte,
    /// No body bytes for the stall timeout.
    Stall,
}

impl std::fmt::Display for Deadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Deadline::Connect => "connect",
            Deadline::FirstByte => "first byte",
            Deadline::Stall => "body stall",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum S3Error {
    #[error("NoSuchKey: s3://{bucket}/{key} does not exist")]
    NoSuchKey { bucket: String, key: String },
    #[error("NoSuchBucket: bucket {bucket:?} does not exist")]
    NoSuchBucket { bucket: String },
    #[error(
        "PreconditionFailed: s3://{bucket}/{key} changed (its ETag is no longer the one asked for)"
    )]
    PreconditionFailed { bucket: String, key: String },
    #[error("NotModified: s3://{bucket}/{key} still has the ETag given in If-None-Match")]
    NotModified { bucket: String, key: String },
    #[error("InvalidRange: {range} is outside s3://{bucket}/{key}")]
    InvalidRange {
        bucket: String,
        key: String,
        range: String,
    },
    #[error("AccessDenied: {message}")]
    AccessDenied { message: String },
    #[error("Throttled ({code}): {message}")]
    Throttled { code: String, message: String },
    #[error("server error {status} {code}: {message}")]
    Server {
        status: u16,
        code: String,
        message: String,
    },
    #[error("request refused with {status} {code}: {message}")]
    BadRequest {
        status: u16,
        code: String,
        message: String,
    },
    #[error("cannot connect to {endpoint}: {message}")]
    Connect { endpoint: String, message: String },
    #[error("transport error talking to {endpoint}: {message}")]
    Transport { endpoint: String, message: String },
    #[error("timed out waiting for {deadline} from {endpoint} after {after:?}")]
    Timeout {
        endpoint: String,
        deadline: Deadline,
        after: Duration,
    },
    #[error("invalid object key {key:?}: {reason}")]
    InvalidKey { key: String, reason: String },
    #[error("malformed response from {endpoint}: {message}")]
    Protocol { endpoint: String, message: String },
    #[error("gave up after {attempts} attempts: {last}")]
    Exhausted { attempts: u32, last: Box<S3Error> },
}

impl S3Error {
    /// The error behind any retry wrapper.
    pub fn cause(&self) -> &S3Error {
        match self {
            S3Error::Exhausted { last, .. } => last.cause(),
            e => e,
        }
    }

    /// Worth another attempt of an idempotent request.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.cause(),
            S3Error::Throttled { .. }
                | S3Error::Server { .. }
                | S3Error::Connect { .. }
                | S3Error::Transport { .. }
                | S3Error::Timeout { .. }
        )
    }

    /// An answer about the object (not a fault of the path to it): never failed over.
    pub fn is_answer(&self) -> bool {
        matches!(
            self.cause(),
            S3Error::NoSuchKey { .. }
                | S3Error::NoSuchBucket { .. }
                | S3Error::PreconditionFailed { .. }
                | S3Error::NotModified { .. }
                | S3Error::InvalidRange { .. }
        )
    }

    /// A cached-only request that the node could not serve from its cache.
    pub fn is_not_cached(&self) -> bool {
        matches!(self.cause(), S3Error::Server { code, .. } if code == super::NOT_CACHED)
    }

    /// The S3 error code this error is answered with by an S3 endpoint (the node).
    pub fn s3_code(&self) -> &str {
        match self.cause() {
            S3Error::NoSuchKey { .. } => "NoSuchKey",
            S3Error::NoSuchBucket { .. } => "NoSuchBucket",
            S3Error::PreconditionFailed { .. } => "PreconditionFailed",
            S3Error::NotModified { .. } => "NotModified",
            S3Error::InvalidRange { .. } => "InvalidRange",
            S3Error::AccessDenied { .. } => "AccessDenied",
            S3Error::Throttled { .. } => "SlowDown",
            S3Error::InvalidKey { .. } => "InvalidArgument",
            S3Error::BadRequest { code, .. } => code,
            S3Error::Server { .. }
            | S3Error::Connect { .. }
            | S3Error::Transport { .. }
            | S3Error::Timeout { .. }
            | S3Error::Protocol { .. }
            | S3Error::Exhausted { .. } => "ServiceUnavailable",
        }
    }

    /// The HTTP status that goes with [`Self::s3_code`].
    pub fn http_status(&self) -> u16 {
        match self.cause() {
            S3Error::NoSuchKey { .. } | S3Error::NoSuchBucket { .. } => 404,
            S3Error::PreconditionFailed { .. } => 412,
            S3Error::NotModified { .. } => 304,
            S3Error::InvalidRange { .. } => 416,
            S3Error::AccessDenied { .. } => 403,
            S3Error::Throttled { .. } => 503,
            S3Error::InvalidKey { .. } => 400,
            S3Error::BadRequest { status, .. } => *status,
            _ => 503,
        }
    }

    /// Maps an error response. `code`/`message` come from the XML body when there is one
    /// (HEAD responses have none).
    pub(crate) fn from_response(
        status: u16,
        code: Option<String>,
        message: Option<String>,
        ctx: &ErrorContext<'_>,
    ) -> S3Error {
        let bucket = ctx.bucket.to_owned();
        let key = ctx.key.to_owned();
        let code_s = code.clone().unwrap_or_default();
        let message = message.unwrap_or_else(|| default_message(status).to_owned());
        match (status, code_s.as_str()) {
            (_, "NoSuchBucket") => S3Error::NoSuchBucket { bucket },
            (_, "NoSuchKey") => S3Error::NoSuchKey { bucket, key },
            (404, _) if ctx.key.is_empty() => S3Error::NoSuchBucket { bucket },
            (404, _) => S3Error::NoSuchKey { bucket, key },
            (412, _) | (_, "PreconditionFailed") => S3Error::PreconditionFailed { bucket, key },
            (304, _) => S3Error::NotModified { bucket, key },
            (416, _) | (_, "InvalidRange") => S3Error::InvalidRange {
                bucket,
                key,
                range: ctx.range.unwrap_or("the range").to_owned(),
            },
            (403, _) => S3Error::AccessDenied {
                message: if code_s.is_empty() || code_s == "AccessDenied" {
                    message
                } else {
                    format!("{code_s}: {message}")
                },
            },
            (429, _)
            | (_, "SlowDown" | "Throttling" | "ThrottlingException" | "RequestLimitExceeded") => {
                S3Error::Throttled {
                    code: if code_s.is_empty() {
                        "TooManyRequests".into()
                    } else {
                        code_s
                    },
                    message,
                }
            }
            (500..=599, _) => S3Error::Server {
                status,
                code: if code_s.is_empty() {
                    default_message(status).replace(' ', "")
                } else {
                    code_s
                },
                message,
            },
            _ => S3Error::BadRequest {
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
}

/// What a request was about, for error messages.
pub(crate) struct ErrorContext<'a> {
    pub bucket: &'a str,
    pub key: &'a str,
    pub range: Option<&'a str>,
}

fn default_message(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "no message",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> ErrorContext<'static> {
        ErrorContext {
            bucket: "b",
            key: "k",
            range: Some("bytes=10-20"),
        }
    }

    #[test]
    fn maps_codes() {
        let e = S3Error::from_response(404, Some("NoSuchKey".into()), None, &ctx());
        assert_eq!(
            e,
            S3Error::NoSuchKey {
                bucket: "b".into(),
                key: "k".into()
            }
        );
        assert!(e.is_answer() && !e.is_retryable());
        let e = S3Error::from_response(
            503,
            Some("SlowDown".into()),
            Some("Please reduce".into()),
            &ctx(),
        );
        assert!(matches!(e, S3Error::Throttled { .. }) && e.is_retryable());
        assert_eq!(e.s3_code(), "SlowDown");
        let e = S3Error::from_response(
            403,
            Some("SignatureDoesNotMatch".into()),
            Some("bad sig".into()),
            &ctx(),
        );
        assert_eq!(
            e.to_string(),
            "AccessDenied: SignatureDoesNotMatch: bad sig"
        );
        let e = S3Error::from_response(416, None, None, &ctx());
        assert!(e.to_string().contains("bytes=10-20"));
        let e = S3Error::from_response(500, None, None, &ctx());
        assert!(matches!(e, S3Error::Server { status: 500, .. }));
        let wrapped = S3Error::Exhausted {
            attempts: 3,
            last: Box::new(e.clone()),
        };
        assert_eq!(wrapped.cause(), &e);
        assert!(wrapped.to_string().contains("after 3 attempts"));
    }
}
