//! What a cluster read fails with.

use crate::blocks::FlightError;
use crate::store::StoreError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The origin's answer (or a node's answer about the object: missing, out of
    /// range), or why the origin could not be read either.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The object changed since the handle was opened: its reads are refused rather
    /// than mixing two versions.
    #[error("s3://{bucket}/{key} changed since it was opened")]
    Stale { bucket: String, key: String },
    /// No node can take a request that only a node can serve (warming).
    #[error("no node can take the block: {0}")]
    NoNode(&'static str),
    /// The task fetching the block died.
    #[error("fetch task failed: {0}")]
    Lost(String),
}

impl ReadError {
    /// `e`, met reading `bucket/key` pinned to one version: a precondition that
    /// failed (a node or the origin ignored If-Match, or the object changed)
    /// makes the handle stale, so that bytes of two versions are never joined.
    pub(crate) fn pinned(e: StoreError, bucket: &str, key: &str) -> ReadError {
        match e {
            StoreError::PreconditionFailed { .. } => ReadError::Stale {
                bucket: bucket.to_owned(),
                key: key.to_owned(),
            },
            e => e.into(),
        }
    }

    /// The store error behind this one, if there is one.
    pub fn store(&self) -> Option<&StoreError> {
        match self {
            ReadError::Store(e) => Some(e.cause()),
            _ => None,
        }
    }
}

impl From<FlightError<ReadError>> for ReadError {
    fn from(e: FlightError<ReadError>) -> Self {
        match e {
            FlightError::Failed(e) => e,
            FlightError::Lost(why) => ReadError::Lost(why),
        }
    }
}
