//! Bytes handed to Python: the one copy a read makes, into Python's memory.

use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Buffers as one Python bytes object: the one copy, into Python's memory.
/// Not `PyBytes::new_with`, which zeroes the object first: a pass over fresh
/// memory as long as the copy, for bytes written over at once.
pub fn to_bytes<'py>(py: Python<'py>, parts: &[Bytes]) -> Bound<'py, PyBytes> {
    let len: usize = parts.iter().map(Bytes::len).sum();
    // SAFETY: a bytes object of `len` bytes with its contents unset, which
    // are all written below before Python sees it; its buffer is `len` bytes
    // long and `at + p.len()` stays within it.
    unsafe {
        let obj =
            pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), len as pyo3::ffi::Py_ssize_t);
        let obj = Bound::from_owned_ptr_or_err(py, obj)
            .expect("a bytes object of a known size")
            .downcast_into_unchecked::<PyBytes>();
        let buf = pyo3::ffi::PyBytes_AsString(obj.as_ptr()) as *mut u8;
        let mut at = 0;
        for p in parts {
            std::ptr::copy_nonoverlapping(p.as_ptr(), buf.add(at), p.len());
            at += p.len();
        }
        obj
    }
}
