//! Filesystem errors, mapped to errno in one place.

use shoal::s3::S3Error;

#[derive(Debug, thiserror::Error)]
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
        }
    }
}

impl From<S3Error> for FsError {
    fn from(e: S3Error) -> Self {
        match e.cause() {
            S3Error::NoSuchKey { .. } => FsError::NotFound,
            S3Error::PreconditionFailed { .. } => FsError::Stale(e.to_string()),
            _ => FsError::Io(e.to_string()),
        }
    }
}
