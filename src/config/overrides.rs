//! Values given on a command line, merged into the file's before validation: a
//! flag meets the same checks as the key it stands for, and an error about it
//! names the flag.

use std::path::PathBuf;

use super::raw::{RawCache, RawConfig, RawMount, RawOrigin};
use super::units::{Dur, Size};

/// What a program's flags set; `None` leaves the file's value.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `--listen`: `node.listen`.
    pub listen: Option<std::net::SocketAddr>,
    /// `--data-dir`: `cache.data_dir`.
    pub data_dir: Option<PathBuf>,
    /// `--cache-size`: `cache.ram_size`.
    pub ram_size: Option<Size>,
    /// `--read-window`: `cluster.read_window` (also without a `[cluster]`).
    pub read_window: Option<usize>,
    /// `--metadata-ttl`: `mount.metadata_ttl`.
    pub metadata_ttl: Option<Dur>,
    /// `--prefetch-files`: `mount.prefetch_files`.
    pub prefetch_files: Option<usize>,
    /// `--metadata`: `mount.metadata` (`cluster` or `origin`).
    pub metadata: Option<String>,
    /// `--disk-cache` and `--disk-cache-size`: `mount.disk_cache`, `mount.disk_cache_size`.
    pub disk_cache: Option<PathBuf>,
    pub disk_cache_size: Option<Size>,
    /// `--zone`: `cluster.zone` (the reader routes within its zone); nothing
    /// without a `[cluster]`.
    pub zone: Option<String>,
    /// `--endpoint` and `--region`: an `[origin]` for a config that has none.
    pub endpoint: Option<String>,
    pub region: Option<String>,
    /// Make an `[origin]` (from `endpoint` and `region`, else defaults) when the
    /// file has none: a mount may run on flags alone.
    pub origin_if_missing: bool,
}

/// The keys the overrides set, and the flag each came from.
pub(super) type Flags = std::collections::HashMap<&'static str, &'static str>;

impl Overrides {
    /// Writes the overrides into `raw`; returns which keys came from which flag,
    /// and a read window for a reader without `[cluster]`.
    pub(super) fn merge(&self, raw: &mut RawConfig) -> Result<(Flags, Option<usize>), String> {
        let mut flags = Flags::new();
        let mut set = |key: &'static str, flag: &'static str| {
            flags.insert(key, flag);
        };
        if let (Some(l), Some(node)) = (self.listen, raw.node.as_mut()) {
            node.listen = Some(l.to_string());
            set("node.listen", "--listen");
        }
        if let Some(d) = &self.data_dir {
            raw.cache.get_or_insert_with(RawCache::default).data_dir =
                Some(d.display().to_string());
            set("cache.data_dir", "--data-dir");
        }
        if let Some(s) = self.ram_size {
            raw.cache.get_or_insert_with(RawCache::default).ram_size = Some(s);
            set("cache.ram_size", "--cache-size");
        }
        let mut standalone_read_window = None;
        if let Some(w) = self.read_window {
            set("cluster.read_window", "--read-window");
            match raw.cluster.as_mut() {
                Some(c) => c.read_window = Some(w),
                None => standalone_read_window = Some(w),
            }
        }
        if let Some(t) = self.metadata_ttl {
            raw.mount.get_or_insert_with(RawMount::default).metadata_ttl = Some(t);
            set("mount.metadata_ttl", "--metadata-ttl");
        }
        if let Some(m) = &self.metadata {
            raw.mount.get_or_insert_with(RawMount::default).metadata = Some(m.clone());
            set("mount.metadata", "--metadata");
        }
        if let Some(n) = self.prefetch_files {
            raw.mount
                .get_or_insert_with(RawMount::default)
                .prefetch_files = Some(n);
            set("mount.prefetch_files", "--prefetch-files");
        }
        if let Some(d) = &self.disk_cache {
            raw.mount.get_or_insert_with(RawMount::default).disk_cache =
                Some(d.display().to_string());
            set("mount.disk_cache", "--disk-cache");
        }
        if let Some(s) = self.disk_cache_size {
            raw.mount
                .get_or_insert_with(RawMount::default)
                .disk_cache_size = Some(s);
            set("mount.disk_cache_size", "--disk-cache-size");
        }
        // Without a [cluster] there is nothing to route: the zone says nothing.
        if let (Some(z), Some(c)) = (&self.zone, raw.cluster.as_mut()) {
            c.zone = Some(z.clone());
            set("cluster.zone", "--zone");
        }
        let from_flags = self.endpoint.is_some() || self.region.is_some();
        match raw.origin {
            Some(_) if from_flags => {
                return Err("--endpoint and --region apply only without an [origin] section".into())
            }
            None if from_flags || self.origin_if_missing => {
                raw.origin = Some(RawOrigin {
                    endpoint: self.endpoint.clone(),
                    region: self.region.clone(),
                    ..Default::default()
                });
                if self.endpoint.is_some() {
                    set("origin.endpoint", "--endpoint");
                }
                if self.region.is_some() {
                    set("origin.region", "--region");
                }
            }
            _ => {}
        }
        Ok((flags, standalone_read_window))
    }
}
