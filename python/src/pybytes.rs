//! Bytes handed to Python: the one copy a read makes, into Python's memory.

use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Buffers as one Python bytes object.
pub fn to_bytes<'py>(py: Python<'py>, parts: &[Bytes]) -> Bound<'py, PyBytes> {
    let len = parts.iter().map(Bytes::len).sum();
    PyBytes::new_with(py, len, |buf| {
        let mut at = 0;
        for p in parts {
            buf[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        Ok(())
    })
    .expect("a bytes object of a known size")
}
