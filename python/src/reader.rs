//! [`Reader`]: one object version open for reading at any offset, fetched the
//! way a mount fetches an open file's: reads that follow one another grow a
//! window of blocks fetched ahead ([`Readahead`]) and take whole blocks; any
//! other read costs its own bytes, asked of the block's owner for just that
//! range. Python's file object in front of it ([`shoal.fs`]) reads a little
//! past each read, as the kernel's read-ahead does in front of a mount.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use shoal::cluster::{Handle, Readahead};

use crate::errors;
use crate::live::{Live, PerProcess};
use crate::pybytes::to_bytes;

#[pyclass(module = "shoal._shoal", frozen)]
pub struct Reader {
    /// The client's reader of each process (shared with the client).
    live: Arc<PerProcess>,
    /// The handle, and the reader it was opened with ([`Live::id`]).
    handle: Mutex<(u64, Handle)>,
    ra: Mutex<Readahead>,
}

impl Reader {
    pub fn new(live: Arc<PerProcess>, opened_with: &Live, handle: Handle) -> Reader {
        Reader {
            live,
            handle: Mutex::new((opened_with.id, handle)),
            // Its reads pass through a read-ahead buffer, as a mount's
            // through the page cache.
            ra: Mutex::new(Readahead::new(false)),
        }
    }

    /// This process's reader and a handle on it, at the version opened: a
    /// handle opened with a reader since stopped (at a fork, in the parent or
    /// the child) is opened again on the current one.
    fn current(&self) -> PyResult<(Arc<Live>, Handle)> {
        let live = self.live.get()?;
        let mut h = self.handle.lock().unwrap();
        if h.0 != live.id {
            let old = &h.1;
            let again = live
                .reader
                .open_known(old.bucket(), old.key(), old.meta().clone());
            *h = (live.id, again);
        }
        Ok((live, h.1.clone()))
    }
}

#[pymethods]
impl Reader {
    #[getter]
    fn size(&self) -> u64 {
        self.handle.lock().unwrap().1.meta().size
    }

    #[getter]
    fn etag(&self) -> String {
        self.handle.lock().unwrap().1.meta().etag.clone()
    }

    /// Bytes `start..end` (clamped to the object) of the version opened.
    fn read<'py>(&self, py: Python<'py>, start: u64, end: u64) -> PyResult<Bound<'py, PyBytes>> {
        Ok(to_bytes(py, &self.fetch(py, start, end)?))
    }

    /// Reads bytes from `start` into `buf` (a writable, contiguous buffer: a
    /// bytearray, a NumPy array, a memoryview of one), as many as it holds or
    /// the object has; returns how many. The bytes are copied once, into `buf`.
    fn readinto(&self, py: Python<'_>, start: u64, buf: PyBuffer<u8>) -> PyResult<usize> {
        if buf.readonly() || !buf.is_c_contiguous() {
            return Err(errors::bad_input(
                "readinto needs a writable, contiguous buffer of bytes",
            ));
        }
        let room = buf.len_bytes();
        let parts = self.fetch(py, start, start.saturating_add(room as u64))?;
        let mut at = 0;
        for p in &parts {
            let n = p.len().min(room - at);
            // SAFETY: the buffer is writable, contiguous and `room` bytes
            // long, `at + n` stays within it, and it cannot be released while
            // `buf` holds it.
            unsafe {
                std::ptr::copy_nonoverlapping(p.as_ptr(), (buf.buf_ptr() as *mut u8).add(at), n)
            };
            at += n;
        }
        Ok(at)
    }
}

impl Reader {
    /// Bytes `start..end` (clamped to the object) as the buffers they are in,
    /// fetched as a mount fetches a read of an open file.
    fn fetch(&self, py: Python<'_>, start: u64, end: u64) -> PyResult<Vec<Bytes>> {
        let (live, h) = self.current()?;
        let end = end.min(h.meta().size);
        if start >= end {
            return Ok(Vec::new());
        }
        let bs = live.reader.block_size();
        let (ahead, whole_blocks) = {
            let mut ra = self.ra.lock().unwrap();
            let going = ra.sequential();
            let ahead = ra.advance(
                start,
                end,
                bs,
                live.reader.read_window() as u64,
                live.reader.inflight_limit() as u64,
                Instant::now(),
            );
            // As a mount: whole blocks for a run going on, or a read of a
            // block's size, or reads in the first block (where a scan starts).
            let run = ra.sequential() && (going || end - start >= bs);
            (ahead, run || end <= bs)
        };
        if let Some((from, count)) = ahead {
            let _in_rt = live.enter();
            h.prefetch(from, count);
        }
        let got = live.run(py, async {
            if whole_blocks {
                h.read_parts(start, end - start)
                    .await
                    .map(|p| (p.parts, p.waited))
            } else {
                h.read_random(start, end - start)
                    .await
                    .map(|b| (vec![b], false))
            }
        });
        match got {
            Ok((parts, waited)) => {
                if waited {
                    self.ra.lock().unwrap().waited();
                }
                Ok(parts)
            }
            Err(e) => Err(live.read_error(&e, h.bucket(), h.key())),
        }
    }
}
