//! What a CSI call fails with, and the gRPC status each becomes: in one place.

use tonic::{Code, Status};

#[derive(Debug, Clone, thiserror::Error)]
pub enum CsiError {
    /// A missing or bad argument, attribute or mount option: the message names it.
    #[error("{0}")]
    Invalid(String),
    /// The target is published already, with something else.
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    NotFound(String),
    /// The mount itself failed: its own error.
    #[error("{0}")]
    Mount(String),
    #[error("{0}")]
    Internal(String),
}

impl From<CsiError> for Status {
    fn from(e: CsiError) -> Status {
        let code = match &e {
            CsiError::Invalid(_) => Code::InvalidArgument,
            CsiError::AlreadyExists(_) => Code::AlreadyExists,
            CsiError::NotFound(_) => Code::NotFound,
            CsiError::Mount(_) | CsiError::Internal(_) => Code::Internal,
        };
        Status::new(code, e.to_string())
    }
}

impl From<std::io::Error> for CsiError {
    fn from(e: std::io::Error) -> CsiError {
        CsiError::Internal(e.to_string())
    }
}
