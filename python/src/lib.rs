//! shoal for Python (`shoal._shoal`): reads through the cache cluster without a
//! mount, with the mount's routing, read-ahead, hedging, failover and origin
//! fallback. The Python package on top (`python/shoal/`) makes it an fsspec
//! filesystem and PyTorch datasets.
//!
//! Every call releases the GIL while it waits for bytes, runs on a tokio runtime
//! of the client's process ([`live`]: built again after a fork), and hands bytes
//! over in one copy, into a Python bytes object. Failures become the exceptions
//! fsspec callers expect in one place ([`errors`]).

mod ahead;
mod client;
mod config;
mod errors;
mod live;
mod malloc;
mod pybytes;
mod reader;
mod stream;

use pyo3::prelude::*;

#[pymodule]
fn _shoal(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<client::Client>()?;
    m.add_class::<reader::Reader>()?;
    m.add_class::<stream::Stream>()?;
    m.add_class::<ahead::Ahead>()?;
    m.add_function(wrap_pyfunction!(ahead::versions, m)?)?;
    m.add_function(wrap_pyfunction!(ahead::prefetch, m)?)?;
    m.add_function(wrap_pyfunction!(ahead::ahead, m)?)?;
    m.add_function(wrap_pyfunction!(live::before_fork, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
