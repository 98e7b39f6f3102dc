//! What the datasets read many objects with: the versions of a list of keys
//! asked of their owner nodes in batches ([`versions`]), the first blocks of a
//! batch's objects fetched at once ([`prefetch`]), and a sequence of objects
//! read ahead of their consumer, handed over in order as each arrives, with a
//! bounded count in flight and bounded bytes held ([`Ahead`]).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::StreamExt;
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use shoal::cluster::{Handle, ReadError};
use shoal::store::ObjectMeta;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use crate::client::Client;
use crate::errors;
use crate::live::Live;
use crate::pybytes::to_bytes;

/// HEADs in flight at once for [`versions`]: enough to hide a node's round
/// trip (or the origin's, cold) behind the others, few enough that a list of
/// a million keys is not a million requests at once.
const HEADS_AT_ONCE: usize = 64;

/// An object to read: bucket, key, and its version if known (size, ETag).
type Object = (String, String, Option<u64>, Option<String>);

/// The version of each `(bucket, key)` (size, ETag, last modified in seconds),
/// or the exception its HEAD failed with: asked through the metadata path, so
/// each owner node answers from what it knows and asks the origin once however
/// many readers ask, [`HEADS_AT_ONCE`] at a time; answers no older than
/// `max_age` seconds if given.
#[pyfunction]
#[pyo3(signature = (client, objects, max_age=None))]
pub fn versions<'py>(
    client: &Bound<'py, Client>,
    objects: Vec<(String, String)>,
    max_age: Option<f64>,
) -> PyResult<Bound<'py, PyList>> {
    let py = client.py();
    let max_age = crate::live::max_age(max_age)?;
    let live = client.get().live()?;
    // Collected: a stream over a closure that borrows is not Send for every
    // lifetime it could be called with.
    let asks: Vec<_> = objects
        .iter()
        .map(|(b, k)| {
            let (live, b, k) = (live.clone(), b.clone(), k.clone());
            async move { live.stat_within(&b, &k, max_age).await }
        })
        .collect();
    let got = live.run(py, async move {
        futures_util::stream::iter(asks)
            .buffered(HEADS_AT_ONCE)
            .collect::<Vec<_>>()
            .await
    });
    let out = PyList::empty(py);
    for ((b, k), r) in objects.iter().zip(got) {
        match r {
            Ok(m) => out.append((m.size, m.etag, m.last_modified.map(crate::client::seconds)))?,
            Err(e) => out.append(errors::store_error(&e, &format!("{b}/{k}")).into_value(py))?,
        }
    }
    Ok(out)
}

/// Starts fetching the first `blocks` blocks of each object (of a version
/// known) into this process's RAM tier, without waiting: the readers a batch's
/// transforms are handed then find their first bytes here or on the way.
#[pyfunction]
pub fn prefetch(client: &Bound<'_, Client>, objects: Vec<Object>, blocks: u64) -> PyResult<()> {
    let live = client.get().live()?;
    let _in_rt = live.enter();
    for (b, k, size, etag) in objects {
        if let (Some(size), Some(etag)) = (size, etag) {
            known(&live, &b, &k, size, etag).prefetch(0, blocks);
        }
    }
    Ok(())
}

fn known(live: &Live, bucket: &str, key: &str, size: u64, etag: String) -> Handle {
    let meta = ObjectMeta {
        size,
        etag,
        ..Default::default()
    };
    live.reader.open_known(bucket, key, meta)
}

/// One object read whole, and its place in what the consumer may hold.
type Arrived = (usize, Result<Bytes, ReadError>, OwnedSemaphorePermit);

/// Objects read ahead of their consumer, each handed over whole, in the
/// order given, as soon as it and those before it have arrived.
#[pyclass(module = "shoal._shoal", frozen)]
pub struct Ahead {
    names: Vec<String>,
    rx: Mutex<mpsc::Receiver<Arrived>>,
    /// Bytes read and not yet handed over, at most the bound given.
    held: Arc<AtomicU64>,
    peak: Arc<AtomicU64>,
    _live: Arc<Live>,
}

/// The bytes bound counts in KiB: a semaphore's permits are a `u32` at a time.
const UNIT: u64 = 1024;

/// `objects` read whole in order, up to `count` at a time and `max_bytes`
/// held (an object larger than that is read alone).
#[pyfunction]
pub fn ahead(
    client: &Bound<'_, Client>,
    objects: Vec<Object>,
    count: usize,
    max_bytes: u64,
) -> PyResult<Ahead> {
    if count == 0 || max_bytes == 0 {
        return Err(errors::bad_input(
            "objects read ahead need a count and a byte bound above 0",
        ));
    }
    let live = client.get().live()?;
    let units = max_bytes.div_ceil(UNIT).min(u32::MAX as u64) as u32;
    let room = Arc::new(Semaphore::new(units as usize));
    let (tx, rx) = mpsc::channel(count);
    let names = objects
        .iter()
        .map(|(b, k, ..)| format!("{b}/{k}"))
        .collect();
    let (held, peak) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let task_live = live.clone();
    let (held_in, peak_in) = (held.clone(), peak.clone());
    live.spawn(async move {
        // Room is taken in order, so the object the consumer waits for next
        // always has its room: nothing after it can take all of it first.
        let opened = futures_util::stream::iter(objects.into_iter().enumerate()).then(
            move |(i, (b, k, size, etag))| {
                let (room, live) = (room.clone(), task_live.clone());
                async move {
                    let opened = match (size, etag) {
                        (Some(size), Some(etag)) => Ok(known(&live, &b, &k, size, etag)),
                        _ => live.open_learning(&b, &k).await,
                    };
                    let need = opened.as_ref().map_or(1, |h| h.meta().size.div_ceil(UNIT));
                    let need = need.clamp(1, units as u64) as u32;
                    let permit = room.acquire_many_owned(need).await.expect("never closed");
                    (i, (b, k), opened, permit, live)
                }
            },
        );
        let read = opened
            .map(move |(i, (b, k), opened, permit, live)| {
                let (held, peak) = (held_in.clone(), peak_in.clone());
                async move {
                    let got = match opened {
                        Ok(h) => whole(&live, &h).await,
                        Err(e) => Err(e),
                    };
                    match &got {
                        Ok(bytes) => {
                            let n = bytes.len() as u64;
                            peak.fetch_max(held.fetch_add(n, Relaxed) + n, Relaxed);
                        }
                        Err(e) => live.failed(e, &b, &k),
                    }
                    (i, got, permit)
                }
            })
            .buffered(count);
        let mut read = Box::pin(read);
        while let Some((i, got, permit)) = read.next().await {
            if tx.send((i, got, permit)).await.is_err() {
                return; // The consumer went away.
            }
        }
    });
    Ok(Ahead {
        names,
        rx: Mutex::new(rx),
        held,
        peak,
        _live: live,
    })
}

/// The whole of `h`'s version; a version that changed since it was listed
/// is read again at the version now.
async fn whole(live: &Live, h: &Handle) -> Result<Bytes, ReadError> {
    match h.read(0, h.meta().size).await {
        Err(ReadError::Stale { .. }) => {
            let again = live.open_learning(h.bucket(), h.key()).await?;
            again.read(0, again.meta().size).await
        }
        r => r,
    }
}

#[pymethods]
impl Ahead {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// `(index, bytes)` of the next object in order.
    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        // The reads stop when the process forks (their runtime with them).
        let forked =
            || PyOSError::new_err("objects read ahead when the process forked: start again");
        if !self._live.usable() {
            return Err(forked());
        }
        let next = py.allow_threads(|| self.rx.lock().unwrap().blocking_recv());
        let Some((i, got, permit)) = next else {
            return if self._live.usable() {
                Ok(None)
            } else {
                Err(forked())
            };
        };
        let got = got.map_err(|e| errors::read_error(&e, &self.names[i]))?;
        let out = to_bytes(py, std::slice::from_ref(&got));
        self.held.fetch_sub(got.len() as u64, Relaxed);
        drop(permit);
        Ok(Some(PyTuple::new(
            py,
            [i.into_pyobject(py)?.into_any(), out.into_any()],
        )?))
    }

    /// The most bytes read and not yet handed over at any time so far.
    #[getter]
    fn peak_bytes(&self) -> u64 {
        self.peak.load(Relaxed)
    }
}
