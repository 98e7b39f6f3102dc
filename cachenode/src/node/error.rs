//! What the node's read path fails with. The S3 layer turns these into S3 errors
//! (`api/error.rs`).

use std::time::Duration;

use shoal::blocks::FlightError;
use shoal::cluster::ReadError;
use shoal::store::StoreError;

#[derive(Debug, Clone, thiserror::Error)]
pub enum NodeError {
    /// The origin's answer, or why it could not be read.
    #[error(transparent)]
    Origin(#[from] StoreError),
    /// A gateway's read through the cluster failed.
    #[error(transparent)]
    Cluster(#[from] ReadError),
    /// A request waited this long on a block fetch someone else started.
    #[error("waited {0:?} for a block fetch in flight")]
    WaitedTooLong(Duration),
    /// What came back is not the block asked for.
    #[error(
        "block {index} came back with {got} bytes of {got_etag:?}, not {want} of {want_etag:?}"
    )]
    BadBlock {
        index: u64,
        got: u64,
        got_etag: String,
        want: u64,
        want_etag: String,
    },
    /// A cached-only request for something neither RAM nor disk holds.
    #[error("not cached here")]
    NotCached,
    /// The task fetching the block died.
    #[error("fetch task failed: {0}")]
    Lost(String),
}

impl NodeError {
    /// The store's error behind this one, if any (an origin's or an owner's answer).
    pub fn store(&self) -> Option<&StoreError> {
        match self {
            NodeError::Origin(e) => Some(e.cause()),
            NodeError::Cluster(e) => e.store(),
            _ => None,
        }
    }

    /// Worth fetching afresh: the failure was of the path, not an answer.
    pub fn is_retryable(&self) -> bool {
        match self {
            NodeError::Origin(e) => e.is_retryable(),
            NodeError::Cluster(ReadError::Store(e)) => e.is_retryable(),
            NodeError::Cluster(ReadError::Stale { .. }) => false,
            _ => true,
        }
    }

    /// An answer about the object (missing, changed, out of range, not modified),
    /// not a failure of the node or the path to the origin.
    pub fn is_answer(&self) -> bool {
        match self {
            NodeError::Cluster(ReadError::Stale { .. }) => true,
            e => e.store().is_some_and(|s| s.is_answer()),
        }
    }

    /// The version asked for is gone: what is cached of the object goes too.
    pub fn says_gone(&self) -> bool {
        matches!(self, NodeError::Cluster(ReadError::Stale { .. }))
            || matches!(
                self.store(),
                Some(StoreError::PreconditionFailed { .. } | StoreError::NoSuchKey { .. })
            )
    }
}

impl From<FlightError<NodeError>> for NodeError {
    fn from(e: FlightError<NodeError>) -> Self {
        match e {
            FlightError::Failed(e) => e,
            FlightError::Lost(why) => NodeError::Lost(why),
        }
    }
}
