//! [`Client`]: the Python object every read goes through. Each call resolves its
//! process's [`Live`] first, so a client made before a fork (a DataLoader's
//! workers) reads with a runtime and connections of the child's own.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use shoal::cluster::{Handle, ReadError};
use shoal::store::{ListRequest, ObjectMeta};

use crate::errors;
use crate::live::{Live, PerProcess};
use crate::pybytes::to_bytes;
use crate::reader::Reader;
use crate::stream::{to_file, Failed, Stream};

#[pyclass(module = "shoal._shoal", frozen)]
pub struct Client {
    live: Arc<PerProcess>,
}

/// One entry of a listing: key, size, ETag, last modified (seconds since the epoch).
type Entry = (String, u64, String, Option<f64>);

impl Client {
    pub fn live(&self) -> PyResult<Arc<Live>> {
        self.live.get()
    }
}

#[pymethods]
impl Client {
    /// A client over `config`: a path to the mount's TOML, or a dict of its keys.
    #[new]
    fn new(config: &Bound<'_, PyAny>) -> PyResult<Client> {
        let config = crate::config::load(config)?;
        let client = Client {
            live: Arc::new(PerProcess::new(config)),
        };
        // A config that names no origin fails here, not at the first read.
        client.live()?;
        Ok(client)
    }

    /// The version of `bucket/key`: size, ETag, last modified, content type;
    /// known no longer than `max_age` seconds ago if given.
    #[pyo3(signature = (bucket, key, max_age=None))]
    fn head<'py>(
        &self,
        py: Python<'py>,
        bucket: &str,
        key: &str,
        max_age: Option<f64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        check_key(key)?;
        let max_age = crate::live::max_age(max_age)?;
        let live = self.live()?;
        let meta = live
            .run(py, live.stat_within(bucket, key, max_age))
            .map_err(|e| errors::store_error(&e, &format!("{bucket}/{key}")))?;
        meta_dict(py, &meta)
    }

    /// Every key under `prefix` (with `delimiter`, the common prefixes too),
    /// page after page; with `max_keys`, no page past the one that reaches it;
    /// with `max_age`, pages no older than that many seconds.
    #[pyo3(signature = (bucket, prefix, delimiter=None, max_keys=None, max_age=None))]
    fn list(
        &self,
        py: Python<'_>,
        bucket: &str,
        prefix: &str,
        delimiter: Option<String>,
        max_keys: Option<usize>,
        max_age: Option<f64>,
    ) -> PyResult<(Vec<Entry>, Vec<String>)> {
        let max_age = crate::live::max_age(max_age)?;
        let live = self.live()?;
        let got = live.run(py, async {
            let (mut objects, mut prefixes) = (Vec::new(), Vec::new());
            let mut req = ListRequest {
                bucket: bucket.to_owned(),
                prefix: prefix.to_owned(),
                delimiter,
                ..Default::default()
            };
            loop {
                let page = live.list_page_within(&req, max_age).await?;
                objects.extend(page.objects.into_iter().map(|o| {
                    let mtime = o.last_modified.map(seconds);
                    (o.key, o.size, o.etag, mtime)
                }));
                prefixes.extend(page.common_prefixes);
                let enough = max_keys.is_some_and(|m| objects.len() + prefixes.len() >= m);
                match page.next_continuation_token {
                    Some(t) if !enough => req.continuation_token = Some(t),
                    _ => return Ok((objects, prefixes)),
                }
            }
        });
        got.map_err(|e| errors::store_error(&e, &format!("{bucket}/{prefix}")))
    }

    /// `bucket/key` open for reading at its version now (`size` and `etag`
    /// given: that version, asking nothing).
    #[pyo3(signature = (bucket, key, size=None, etag=None))]
    fn open(
        slf: &Bound<'_, Self>,
        bucket: &str,
        key: &str,
        size: Option<u64>,
        etag: Option<String>,
    ) -> PyResult<Reader> {
        check_key(key)?;
        let me = slf.get();
        let live = me.live()?;
        let handle = match (size, etag) {
            (Some(size), Some(etag)) => live.reader.open_known(
                bucket,
                key,
                ObjectMeta {
                    size,
                    etag,
                    ..Default::default()
                },
            ),
            _ => live
                .run(slf.py(), live.open_stat(bucket, key))
                .map_err(|e| live.read_error(&e, bucket, key))?,
        };
        Ok(Reader::new(me.live.clone(), &live, handle))
    }

    /// Bytes `start..end` of `bucket/key` (negative: from the end; `None`: its
    /// start or end), of one version: the one of `size` and `etag` if given
    /// (a listing's), else the one now.
    #[pyo3(signature = (bucket, key, start=None, end=None, size=None, etag=None))]
    #[allow(clippy::too_many_arguments)]
    fn cat<'py>(
        &self,
        py: Python<'py>,
        bucket: String,
        key: String,
        start: Option<i64>,
        end: Option<i64>,
        size: Option<u64>,
        etag: Option<String>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let want = Want::new(bucket, key, start, end, size, etag)?;
        let live = self.live()?;
        let mut got = live.run(py, read_ranges(&live, std::slice::from_ref(&want)));
        let b = got
            .pop()
            .expect("one answer per range")
            .map_err(|e| live.read_error(&e, &want.bucket, &want.key))?;
        Ok(to_bytes(py, &[b]))
    }

    /// Many ranges, `(bucket, key, start, end)` each, or `(bucket, key, start,
    /// end, size, etag)` of a version known, read at once (each object opened
    /// once, at one version): their bytes, or the exception each failed with.
    fn cat_ranges<'py>(
        &self,
        py: Python<'py>,
        ranges: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let ranges = ranges
            .iter()
            .map(Want::extract)
            .collect::<PyResult<Vec<_>>>()?;
        let live = self.live()?;
        let got = live.run(py, read_ranges(&live, &ranges));
        let out = PyList::empty(py);
        for (Want { bucket, key, .. }, r) in ranges.iter().zip(got) {
            match r {
                Ok(b) => out.append(to_bytes(py, &[b]))?,
                Err(e) => out.append(live.read_error(&e, bucket, key).into_value(py))?,
            }
        }
        Ok(out)
    }

    /// Copies `bucket/key` (one version) to the local file `path`; returns its size.
    fn get(
        &self,
        py: Python<'_>,
        bucket: &str,
        key: &str,
        path: std::path::PathBuf,
    ) -> PyResult<u64> {
        check_key(key)?;
        let live = self.live()?;
        let shown = path.display().to_string();
        let got = live.run(py, async {
            let h = live
                .open_learning(bucket, key)
                .await
                .map_err(Failed::Read)?;
            to_file(&h, &path).await
        });
        got.map_err(|e| match e {
            Failed::Read(e) => live.read_error(&e, bucket, key),
            Failed::Local(e) => errors::local_io(&e, &shown),
        })
    }

    /// `bucket/key` (one version) as an iterator of its bytes, block by block,
    /// fetched ahead of the consumer.
    fn stream(&self, py: Python<'_>, bucket: &str, key: &str) -> PyResult<Stream> {
        check_key(key)?;
        let live = self.live()?;
        let h = live
            .run(py, live.open_learning(bucket, key))
            .map_err(|e| live.read_error(&e, bucket, key))?;
        Ok(Stream::start(&live, h))
    }

    /// The process whose runtime and connections this client reads with now.
    fn runtime_pid(&self) -> PyResult<u32> {
        Ok(self.live()?.pid)
    }

    /// The reader's counters (blocks by source, origin fallbacks by cause, ...)
    /// in Prometheus' text format.
    fn metrics(&self) -> PyResult<String> {
        let live = self.live()?;
        let mut registry = prometheus_client::registry::Registry::default();
        live.reader.refresh_gauges();
        live.reader.metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry)
            .map_err(|e| errors::bad_input(e.to_string()))?;
        Ok(text)
    }
}

/// A range of an object to read, of a version known or not.
pub struct Want {
    bucket: String,
    key: String,
    start: Option<i64>,
    end: Option<i64>,
    known: Option<(u64, String)>,
}

impl Want {
    fn new(
        bucket: String,
        key: String,
        start: Option<i64>,
        end: Option<i64>,
        size: Option<u64>,
        etag: Option<String>,
    ) -> PyResult<Want> {
        check_key(&key)?;
        Ok(Want {
            bucket,
            key,
            start,
            end,
            known: size.zip(etag),
        })
    }

    fn extract(t: &Bound<'_, PyAny>) -> PyResult<Want> {
        type Known = (
            String,
            String,
            Option<i64>,
            Option<i64>,
            Option<u64>,
            Option<String>,
        );
        if let Ok((b, k, s, e)) = t.extract::<(String, String, Option<i64>, Option<i64>)>() {
            return Want::new(b, k, s, e, None, None);
        }
        let (b, k, s, e, size, etag): Known = t.extract().map_err(|_| {
            errors::bad_input(
                "a range is (bucket, key, start, end) or (bucket, key, start, end, size, etag)",
            )
        })?;
        Want::new(b, k, s, e, size, etag)
    }
}

/// Opens each object of `ranges` once (at the version given, else learned from
/// its first block when every range of it starts there, else by a HEAD), then
/// reads every range at once.
async fn read_ranges(live: &Live, ranges: &[Want]) -> Vec<Result<Bytes, ReadError>> {
    // Per object: whether every range starts at 0, and a version given.
    type Opening<'a> = (bool, Option<&'a (u64, String)>);
    let mut objects: HashMap<(&str, &str), Opening> = HashMap::new();
    for w in ranges {
        let o = objects
            .entry((w.bucket.as_str(), w.key.as_str()))
            .or_insert((true, None));
        o.0 &= w.start.unwrap_or(0) == 0;
        o.1 = o.1.or(w.known.as_ref());
    }
    let opened = futures_util::future::join_all(objects.into_iter().map(
        |((b, k), (from_start, known))| async move {
            let h = match known {
                Some((size, etag)) => Ok(live.reader.open_known(
                    b,
                    k,
                    ObjectMeta {
                        size: *size,
                        etag: etag.clone(),
                        ..Default::default()
                    },
                )),
                None if from_start => live.open_learning(b, k).await,
                None => live.open_stat(b, k).await,
            };
            ((b, k), h)
        },
    ))
    .await;
    let handles: HashMap<(&str, &str), Result<Handle, ReadError>> = opened.into_iter().collect();
    futures_util::future::join_all(ranges.iter().map(|w| {
        let h = &handles[&(w.bucket.as_str(), w.key.as_str())];
        async move {
            let h = h.as_ref().map_err(Clone::clone)?;
            let (lo, hi) = span(h.meta().size, w.start, w.end);
            h.read_random(lo, hi - lo).await
        }
    }))
    .await
}

/// `start..end` of an object of `size` bytes as fsspec means them: negative
/// from the end, `None` its bounds, clamped to the object.
pub fn span(size: u64, start: Option<i64>, end: Option<i64>) -> (u64, u64) {
    let at = |v: i64| {
        if v < 0 {
            size.saturating_sub(v.unsigned_abs())
        } else {
            (v as u64).min(size)
        }
    };
    let lo = start.map_or(0, at);
    let hi = end.map_or(size, at);
    (lo, hi.max(lo))
}

pub fn seconds(t: std::time::SystemTime) -> f64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn meta_dict<'py>(py: Python<'py>, meta: &ObjectMeta) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("size", meta.size)?;
    d.set_item("etag", &meta.etag)?;
    d.set_item("last_modified", meta.last_modified.map(seconds))?;
    d.set_item("content_type", &meta.content_type)?;
    Ok(d)
}

/// An object's key must name one: not empty.
fn check_key(key: &str) -> PyResult<()> {
    if key.is_empty() {
        return Err(errors::bad_input(
            "a path names an object as BUCKET/KEY: the key is missing",
        ));
    }
    Ok(())
}
