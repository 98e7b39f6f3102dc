//! Filesystem errors, mapped to errno in one place.

use shoal::blocks::FlightError;
use shoal::cluster::ReadError;
use shoal::store::StoreError;

#[derive(Debug, Clone, thiserror::Error)]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("read-only file system")]
    ReadOnly,
    /// The object changed since it was opened.
    #[error("object changed while open: {0}")]
    Stale(String),
    #[error("bad file handle")]
    BadHandle,
    #[error("I/O error: {0}")]
    Io(String),
    /// Not readable with the origin's credentials, or archived.
    #[error("permission denied: {0}")]
    Denied(String),
}

impl FsError {
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::ReadOnly => libc::EROFS,
            FsError::Stale(_) => libc::ESTALE,
            FsError::BadHandle => libc::EBADF,
            FsError::Io(_) => libc::EIO,
            FsError::Denied(_) => libc::EACCES,
        }
    }
}

impl From<StoreError> for FsError {
    fn from(e: StoreError) -> Self {
        match e.cause() {
            StoreError::NoSuchKey { .. } => FsError::NotFound,
            StoreError::PreconditionFailed { .. } => FsError::Stale(e.to_string()),
            StoreError::AccessDenied { .. }
            | StoreError::Archived { .. }
            | StoreError::Credentials { .. }
            | StoreError::ExpiredToken { .. } => FsError::Denied(e.to_string()),
            _ => FsError::Io(e.to_string()),
        }
    }
}

impl From<ReadError> for FsError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Store(e) => e.into(),
            ReadError::Stale { .. } => FsError::Stale(e.to_string()),
            e => FsError::Io(e.to_string()),
        }
    }
}

impl From<FlightError<FsError>> for FsError {
    fn from(e: FlightError<FsError>) -> Self {
        match e {
            FlightError::Failed(e) => e,
            FlightError::Lost(why) => FsError::Io(format!("listing task failed: {why}")),
        }
    }
}
