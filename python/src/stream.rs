//! [`Stream`]: an object's bytes as an iterator of chunks, block by block, fetched
//! ahead of the consumer by a task of the runtime; and a copy of an object to a
//! local file.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::StreamExt;
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use shoal::cluster::{Handle, ReadError};
use tokio::sync::mpsc;

use crate::live::Live;
use crate::pybytes::to_bytes;

#[pyclass(module = "shoal._shoal", frozen)]
pub struct Stream {
    bucket: String,
    key: String,
    size: u64,
    /// Bytes handed over so far: a stream that ends short of `size` failed.
    given: AtomicU64,
    rx: Mutex<mpsc::Receiver<Result<Bytes, ReadError>>>,
    /// The runtime the fetching task runs on lives as long as the stream.
    _live: Arc<Live>,
}

impl Stream {
    pub fn start(live: &Arc<Live>, h: Handle) -> Stream {
        let (tx, rx) = mpsc::channel(live.reader.read_window().max(1));
        let (bucket, key, size) = (h.bucket().to_owned(), h.key().to_owned(), h.meta().size);
        live.spawn(async move {
            let mut body = Box::pin(h.stream(0, h.meta().size));
            while let Some(chunk) = body.next().await {
                let failed = chunk.is_err();
                // The consumer went away: stop fetching.
                if tx.send(chunk).await.is_err() || failed {
                    return;
                }
            }
        });
        Stream {
            bucket,
            key,
            size,
            given: AtomicU64::new(0),
            rx: Mutex::new(rx),
            _live: live.clone(),
        }
    }
}

#[pymethods]
impl Stream {
    #[getter]
    fn size(&self) -> u64 {
        self.size
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        // Its fetching stops when the process forks (its runtime with it).
        if !self._live.usable() {
            return Err(PyOSError::new_err(format!(
                "a stream of s3://{}/{} was open when the process forked: open it again",
                self.bucket, self.key
            )));
        }
        let next = py.allow_threads(|| self.rx.lock().unwrap().blocking_recv());
        match next {
            None if self.given.load(Relaxed) < self.size => Err(PyOSError::new_err((
                libc::EIO,
                format!(
                    "the stream of s3://{}/{} ended after {} of {} bytes",
                    self.bucket,
                    self.key,
                    self.given.load(Relaxed),
                    self.size
                ),
            ))),
            None => Ok(None),
            Some(Ok(b)) => {
                self.given.fetch_add(b.len() as u64, Relaxed);
                Ok(Some(to_bytes(py, &[b])))
            }
            Some(Err(e)) => Err(crate::errors::read_error(
                &e,
                &format!("{}/{}", self.bucket, self.key),
            )),
        }
    }
}

/// What a copy to a local file failed with.
pub enum Failed {
    Read(ReadError),
    Local(std::io::Error),
}

/// Writes the whole version `h` is open at to `path`.
pub async fn to_file(h: &Handle, path: &std::path::Path) -> Result<u64, Failed> {
    let file = std::fs::File::create(path).map_err(Failed::Local)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let mut body = Box::pin(h.stream(0, h.meta().size));
    let mut n = 0;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(Failed::Read)?;
        out.write_all(&chunk).map_err(Failed::Local)?;
        n += chunk.len() as u64;
    }
    out.flush().map_err(Failed::Local)?;
    Ok(n)
}
