//! What a client reads with in one process: a tokio runtime, the cluster reader
//! and the store that answers listings and HEADs. None of it survives a fork
//! (the runtime's threads stay in the parent, its sockets would be shared): a
//! child builds its own, and the parent's is left alone, never dropped there.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use shoal::cluster::{ClusterReader, Handle, ReadError, ReaderOptions};
use shoal::config::{Config, MetadataSource};
use shoal::store::{GetObject, ObjectMeta, ObjectStore, StoreError};

use crate::errors;

pub struct Live {
    /// The process this was built in.
    pub pid: u32,
    rt: tokio::runtime::Runtime,
    pub reader: Arc<ClusterReader>,
    /// Listings and HEADs: through the owner nodes (the mount's
    /// `metadata = "cluster"`, the default), else the origin.
    pub metadata: Arc<dyn ObjectStore>,
    /// Objects a read found changed: their next version is asked of the origin,
    /// since a node may go on answering the old one for its metadata TTL.
    changed: Mutex<HashSet<(String, String)>>,
}

/// Runtime threads per process: a few suffice for the I/O of one reader, and a
/// DataLoader runs several processes at once.
fn threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(2, 4)
}

impl Live {
    pub fn start(config: &Config) -> PyResult<Live> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads())
            .thread_name("shoal-io")
            .enable_all()
            .build()
            .map_err(|e| errors::local_io(&e, "<runtime>"))?;
        let mut cfg = config.clone();
        rt.block_on(shoal::settle_region(&mut cfg));
        let reader = {
            // Credential refreshes and a DNS membership run in tasks of their own.
            let _in_rt = rt.enter();
            let origin = cfg
                .origin()
                .map_err(|e| errors::config_error(&e))?
                .client()
                .map_err(|e| errors::store_error(&e, "<origin>"))?;
            ClusterReader::new(
                origin,
                cfg.reader_cluster().as_ref(),
                ReaderOptions {
                    ram_bytes: cfg.cache.ram_size,
                    evicting: cfg.evicting(),
                    ..Default::default()
                },
            )
        };
        rt.block_on(reader.membership_ready());
        let metadata = if cfg.mount.metadata == MetadataSource::Cluster && cfg.cluster().is_some() {
            let _in_rt = rt.enter();
            reader.metadata(cfg.mount.metadata_ttl)
        } else {
            reader.origin().clone()
        };
        Ok(Live {
            pid: std::process::id(),
            rt,
            reader,
            metadata,
            changed: Mutex::new(HashSet::new()),
        })
    }

    /// Runs `f` to completion on this runtime with the GIL released.
    pub fn run<F>(&self, py: Python<'_>, f: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        py.allow_threads(|| self.rt.block_on(f))
    }

    /// Enters this runtime, for what spawns tasks without waiting on them.
    pub fn enter(&self) -> tokio::runtime::EnterGuard<'_> {
        self.rt.enter()
    }

    pub fn spawn<F>(&self, f: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.rt.spawn(f)
    }

    /// The version of `bucket/key` now: through the metadata path, or from the
    /// origin itself when a read found the object changed.
    pub async fn stat(&self, bucket: &str, key: &str) -> Result<ObjectMeta, StoreError> {
        let req = GetObject::new(bucket, key);
        let changed = self
            .changed
            .lock()
            .unwrap()
            .remove(&(bucket.to_owned(), key.to_owned()));
        if changed {
            return self.reader.origin().head(&req).await;
        }
        self.metadata.head(&req).await
    }

    /// `bucket/key` open at its version now, learned from the object's first
    /// block (which a read from the start wants anyway): one request for a
    /// small object.
    pub async fn open_learning(&self, bucket: &str, key: &str) -> Result<Handle, ReadError> {
        self.changed
            .lock()
            .unwrap()
            .remove(&(bucket.to_owned(), key.to_owned()));
        self.reader.open(bucket, key, None).await
    }

    /// `bucket/key` open at its version now, learned by a HEAD.
    pub async fn open_stat(&self, bucket: &str, key: &str) -> Result<Handle, ReadError> {
        let meta = self.stat(bucket, key).await?;
        Ok(self.reader.open_known(bucket, key, meta))
    }

    /// Notes what a read of `bucket/key` failed with: a changed object is asked
    /// of the origin next time.
    pub fn failed(&self, e: &ReadError, bucket: &str, key: &str) {
        let changed = matches!(e, ReadError::Stale { .. })
            || matches!(e.store(), Some(StoreError::PreconditionFailed { .. }));
        if changed {
            self.changed
                .lock()
                .unwrap()
                .insert((bucket.to_owned(), key.to_owned()));
        }
    }

    /// The failure of a read of `bucket/key`, noted and as a Python exception.
    pub fn read_error(&self, e: &ReadError, bucket: &str, key: &str) -> PyErr {
        self.failed(e, bucket, key);
        errors::read_error(e, &format!("{bucket}/{key}"))
    }
}

/// One process's [`Live`] for a config, rebuilt after a fork.
pub struct PerProcess {
    config: Config,
    slot: Mutex<Option<Arc<Live>>>,
}

impl PerProcess {
    pub fn new(config: Config) -> PerProcess {
        PerProcess {
            config,
            slot: Mutex::new(None),
        }
    }

    pub fn get(&self) -> PyResult<Arc<Live>> {
        if let Some(live) = self.current() {
            return Ok(live);
        }
        // Built with the GIL released (a region may be asked of the instance
        // metadata, a DNS membership resolved) and this slot's lock not held:
        // a thread waiting on it would hold the GIL this one must take back.
        let built = Python::with_gil(|py| py.allow_threads(|| Live::start(&self.config)))?;
        let mut slot = self.slot.lock().unwrap();
        match slot.as_ref() {
            // Another thread of this process was first: its reader serves.
            Some(l) if l.pid == std::process::id() => Ok(l.clone()),
            _ => {
                let live = Arc::new(built);
                *slot = Some(live.clone());
                Ok(live)
            }
        }
    }

    /// This process's, if built.
    fn current(&self) -> Option<Arc<Live>> {
        let mut slot = self.slot.lock().unwrap();
        match slot.as_ref() {
            Some(l) if l.pid == std::process::id() => Some(l.clone()),
            // Built before a fork: its runtime's threads are not in this
            // process, and dropping it would wait for them forever.
            Some(_) => {
                std::mem::forget(slot.take());
                None
            }
            None => None,
        }
    }
}

impl Drop for PerProcess {
    fn drop(&mut self) {
        let slot = self.slot.get_mut().unwrap_or_else(|p| p.into_inner());
        if slot.as_ref().is_some_and(|l| l.pid != std::process::id()) {
            std::mem::forget(slot.take());
        }
    }
}
