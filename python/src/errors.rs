//! Every failure the module raises, mapped to the exception fsspec callers
//! expect, in this one place: a missing object or bucket is FileNotFoundError,
//! a refusal PermissionError, a changed object OSError with errno ESTALE (the
//! read is refused rather than joining two versions), a deadline TimeoutError,
//! a bad config or argument ValueError, anything else OSError with EIO.

use pyo3::exceptions::{
    PyConnectionError, PyFileNotFoundError, PyOSError, PyPermissionError, PyTimeoutError,
    PyValueError,
};
use pyo3::PyErr;
use shoal::cluster::ReadError;
use shoal::config::ConfigError;
use shoal::store::StoreError;

/// `e`, met while reading `path` (`bucket/key`), as a Python exception.
pub fn read_error(e: &ReadError, path: &str) -> PyErr {
    match e {
        ReadError::Store(s) => store_error(s, path),
        ReadError::Stale { .. } => PyOSError::new_err((
            libc::ESTALE,
            format!("{e}: reopen it to read the new version"),
            path.to_owned(),
        )),
        ReadError::NoNode(_) | ReadError::Lost(_) => {
            PyOSError::new_err((libc::EIO, e.to_string(), path.to_owned()))
        }
    }
}

/// `e`, the answer to a request about `path`, as a Python exception.
pub fn store_error(e: &StoreError, path: &str) -> PyErr {
    let msg = e.to_string();
    let path = path.to_owned();
    match e.cause() {
        StoreError::NoSuchKey { .. } | StoreError::NoSuchBucket { .. } => {
            PyFileNotFoundError::new_err((libc::ENOENT, msg, path))
        }
        StoreError::AccessDenied { .. }
        | StoreError::Credentials { .. }
        | StoreError::ExpiredToken { .. }
        | StoreError::WrongRegion { .. }
        | StoreError::Archived { .. } => PyPermissionError::new_err((libc::EACCES, msg, path)),
        StoreError::PreconditionFailed { .. } => PyOSError::new_err((libc::ESTALE, msg, path)),
        StoreError::InvalidKey { .. } => PyValueError::new_err(msg),
        StoreError::InvalidRange { .. } => PyOSError::new_err((libc::EINVAL, msg, path)),
        StoreError::Timeout { .. } => PyTimeoutError::new_err((libc::ETIMEDOUT, msg, path)),
        StoreError::Connect { .. } => PyConnectionError::new_err((libc::ECONNREFUSED, msg, path)),
        _ => PyOSError::new_err((libc::EIO, msg, path)),
    }
}

/// A config that cannot be used: its message names the file, the key and what
/// is wrong.
pub fn config_error(e: &ConfigError) -> PyErr {
    PyValueError::new_err(format!("shoal config: {e}"))
}

/// A config file that is not there.
pub fn config_missing(path: &str, why: &std::io::Error) -> PyErr {
    PyFileNotFoundError::new_err((
        libc::ENOENT,
        format!("shoal config {path:?} cannot be read: {why}"),
        path.to_owned(),
    ))
}

/// A path or argument the module cannot use.
pub fn bad_input(msg: impl Into<String>) -> PyErr {
    PyValueError::new_err(msg.into())
}

/// The I/O of a local file (`get` writing its copy).
pub fn local_io(e: &std::io::Error, path: &str) -> PyErr {
    PyOSError::new_err((
        e.raw_os_error().unwrap_or(libc::EIO),
        e.to_string(),
        path.to_owned(),
    ))
}
