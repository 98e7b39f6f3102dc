//! What a client reads with in one process: a tokio runtime, the cluster reader
//! and the store that answers listings and HEADs. None of it survives a fork
//! (the runtime's threads stay in the parent, its sockets would be shared): a
//! child builds its own, and the parent's is left alone, never dropped there.
//!
//! Nor may the runtime's threads run while a process forks: a thread in the
//! middle of anything that locks or writes shared state (the allocator's, the
//! C library's, a buffer pool's) leaves the child a lock no one will release
//! or a structure half written (workers of a DataLoader hung, or aborted in
//! `free()`). So every runtime stops just before a fork ([`before_fork`], run
//! by `os.register_at_fork`), and whatever reads next, in the parent or the
//! child, builds a new one.

use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use pyo3::prelude::*;
use shoal::cluster::{ClusterMetadata, ClusterReader, Handle, ReadError, ReaderOptions};
use shoal::config::{Config, MetadataSource};
use shoal::store::{GetObject, ListPage, ListRequest, ObjectMeta, ObjectStore, StoreError};

use crate::errors;

pub struct Live {
    /// The process this was built in.
    pub pid: u32,
    /// Which of the process's readers this is: a handle opened with another
    /// is opened again with this one.
    pub id: u64,
    /// The runtime until it stops (before a fork); its handle runs, enters
    /// and spawns meanwhile.
    rt: Mutex<Option<tokio::runtime::Runtime>>,
    handle: tokio::runtime::Handle,
    stopped: AtomicBool,
    pub reader: Arc<ClusterReader>,
    /// Listings and HEADs: through the owner nodes (the mount's
    /// `metadata = "cluster"`, the default), else the origin.
    pub metadata: Arc<dyn ObjectStore>,
    /// The same, when it goes through the nodes: asks of it may bound the age
    /// of the answer (a refresh).
    cluster_metadata: Option<Arc<ClusterMetadata>>,
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

/// Blocks in flight at once in a process: as a mount's (8 read windows),
/// but no more than half its RAM tier holds, so that what a sequential
/// reader fetches ahead is still there when it comes to it; never under one
/// window.
fn inflight_blocks(cfg: &Config) -> usize {
    let c = cfg
        .reader_cluster()
        .unwrap_or_else(shoal::config::ClusterConfig::standalone);
    let window = c.read_window.max(1);
    ((cfg.cache.ram_size / c.block_size.max(1) / 2) as usize).clamp(window, window * 8)
}

impl Live {
    pub fn start(config: &Config) -> PyResult<Live> {
        crate::malloc::tune();
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
                    max_inflight_blocks: Some(inflight_blocks(&cfg)),
                    evicting: cfg.evicting(),
                    ..Default::default()
                },
            )
        };
        rt.block_on(reader.membership_ready());
        let cluster_metadata =
            (cfg.mount.metadata == MetadataSource::Cluster && cfg.cluster().is_some()).then(|| {
                let _in_rt = rt.enter();
                Arc::new(ClusterMetadata::new(reader.clone(), cfg.mount.metadata_ttl))
            });
        let metadata = match &cluster_metadata {
            Some(m) => m.clone() as Arc<dyn ObjectStore>,
            None => reader.origin().clone(),
        };
        static IDS: AtomicU64 = AtomicU64::new(0);
        Ok(Live {
            pid: std::process::id(),
            id: IDS.fetch_add(1, Ordering::Relaxed),
            handle: rt.handle().clone(),
            rt: Mutex::new(Some(rt)),
            stopped: AtomicBool::new(false),
            reader,
            metadata,
            cluster_metadata,
            changed: Mutex::new(HashSet::new()),
        })
    }

    /// Runs `f` to completion on this runtime with the GIL released.
    pub fn run<F>(&self, py: Python<'_>, f: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        py.allow_threads(|| self.handle.block_on(f))
    }

    /// Enters this runtime, for what spawns tasks without waiting on them.
    pub fn enter(&self) -> tokio::runtime::EnterGuard<'_> {
        self.handle.enter()
    }

    pub fn spawn<F>(&self, f: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(f)
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

    /// [`Self::stat`], no older than `max_age` if given: the owner node asks
    /// the origin again unless it learned the version within it.
    pub async fn stat_within(
        &self,
        bucket: &str,
        key: &str,
        max_age: Option<Duration>,
    ) -> Result<ObjectMeta, StoreError> {
        match (&self.cluster_metadata, max_age) {
            (Some(m), Some(_)) => m.head_within(&GetObject::new(bucket, key), max_age).await,
            _ => self.stat(bucket, key).await,
        }
    }

    /// A page of a listing through the metadata path, no older than `max_age`
    /// if given.
    pub async fn list_page_within(
        &self,
        req: &ListRequest,
        max_age: Option<Duration>,
    ) -> Result<ListPage, StoreError> {
        match (&self.cluster_metadata, max_age) {
            (Some(m), Some(_)) => m.list_page_within(req, max_age).await,
            _ => self.metadata.list_page(req).await,
        }
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

impl Live {
    /// Stops the runtime: its tasks end, its threads exit (a thread still in
    /// a blocking call is waited for a second at most).
    fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let rt = self.rt.lock().unwrap().take();
        if let Some(rt) = rt {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }

    /// Whether this may still read: built in this process, not stopped.
    pub fn usable(&self) -> bool {
        self.pid == std::process::id() && !self.stopped.load(Ordering::SeqCst)
    }
}

/// Every reader built in this process and not yet dropped.
static LIVES: Mutex<Vec<Weak<Live>>> = Mutex::new(Vec::new());

/// Stops every runtime of this process; called just before it forks.
#[pyfunction]
pub fn before_fork(py: Python<'_>) {
    let lives: Vec<Arc<Live>> = {
        let mut all = LIVES.lock().unwrap();
        all.retain(|w| w.strong_count() > 0);
        all.iter().filter_map(Weak::upgrade).collect()
    };
    // Released: a thread of this process may be finishing a read, and needs
    // the interpreter back once it has.
    py.allow_threads(|| {
        for l in lives.iter().filter(|l| l.pid == std::process::id()) {
            l.stop();
        }
    });
}

/// `max_age` seconds (a Python float) as an age bound: 0 or more, at most a
/// day (a node's longest); `None` stays unbounded.
pub fn max_age(max_age: Option<f64>) -> PyResult<Option<Duration>> {
    let Some(s) = max_age else { return Ok(None) };
    if !(s.is_finite() && s >= 0.0) {
        return Err(errors::bad_input(format!(
            "max_age is seconds, 0 or more: not {s}"
        )));
    }
    Ok(Some(Duration::from_secs_f64(s.min(86_400.0))))
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
            Some(l) if l.usable() => Ok(l.clone()),
            _ => {
                let live = Arc::new(built);
                LIVES.lock().unwrap().push(Arc::downgrade(&live));
                if let Some(old) = slot.replace(live.clone()) {
                    forget_foreign(old);
                }
                Ok(live)
            }
        }
    }

    /// This process's, if built.
    fn current(&self) -> Option<Arc<Live>> {
        let mut slot = self.slot.lock().unwrap();
        match slot.as_ref() {
            Some(l) if l.usable() => Some(l.clone()),
            Some(_) => {
                forget_foreign(slot.take()?);
                None
            }
            None => None,
        }
    }
}

/// Lets go of a reader that may no longer read: one of this process, stopped,
/// is dropped; one built before a fork is forgotten (its memory is the
/// parent's copy, and nothing of it is this process's to release).
fn forget_foreign(old: Arc<Live>) {
    if old.pid != std::process::id() {
        std::mem::forget(old);
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
