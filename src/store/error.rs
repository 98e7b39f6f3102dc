//! S3 errors as types, mapped from HTTP status and S3's XML error codes in one place
//! ([`StoreError::from_response`]).

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
pub enum StoreError {
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
    /// No credentials could be had (every provider of the chain was tried).
    #[error("{message}")]
    Credentials { message: String },
    /// The origin refused the session token as expired or invalid (after a
    /// refresh and a retry).
    #[error("{code}: {message}")]
    ExpiredToken { code: String, message: String },
    /// The bucket is in another region than the requests were signed for.
    #[error("bucket {bucket:?} is in region {region}, not {signed_for}: set origin.region = \"{region}\"")]
    WrongRegion {
        bucket: String,
        region: String,
        signed_for: String,
    },
    /// An archived object (GLACIER, DEEP_ARCHIVE) that has not been restored.
    #[error("s3://{bucket}/{key} is archived ({message}): restore it first")]
    Archived {
        bucket: String,
        key: String,
        message: String,
    },
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
    #[error("body ended after {got} of {want} bytes")]
    ShortBody { got: u64, want: u64 },
    #[error("gave up after {attempts} attempts: {last}")]
    Exhausted {
        attempts: u32,
        last: Box<StoreError>,
    },
}

impl StoreError {
    /// The error behind any retry wrapper.
    pub fn cause(&self) -> &StoreError {
        match self {
            StoreError::Exhausted { last, .. } => last.cause(),
            e => e,
        }
    }

    /// Worth another attempt of an idempotent request.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.cause(),
            StoreError::Throttled { .. }
                | StoreError::Server { .. }
                | StoreError::Connect { .. }
                | StoreError::Transport { .. }
                | StoreError::Timeout { .. }
                | StoreError::ShortBody { .. }
        )
    }

    /// The service asks for fewer requests (`503 SlowDown`, `429`, a throttling
    /// code): retried after a wait, and the origin's budget shrinks.
    pub fn is_throttled(&self) -> bool {
        matches!(self.cause(), StoreError::Throttled { .. })
    }

    /// An answer about the object (not a fault of the path to it): never failed over.
    pub fn is_answer(&self) -> bool {
        matches!(
            self.cause(),
            StoreError::NoSuchKey { .. }
                | StoreError::NoSuchBucket { .. }
                | StoreError::PreconditionFailed { .. }
                | StoreError::NotModified { .. }
                | StoreError::InvalidRange { .. }
        )
    }
}
