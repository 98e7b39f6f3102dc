//! `[mount]`: what the mount shows and how it reads ahead.

use std::path::PathBuf;

use crate::config::raw::RawMount;
use crate::config::{defaults, MetadataSource, MountConfig};

use super::{Validator, R};

impl Validator<'_> {
    fn mode(&self, key: &str, s: Option<String>, default: u32) -> R<u32> {
        match s {
            None => Ok(default),
            Some(s) => u32::from_str_radix(s.trim_start_matches("0o"), 8)
                .ok()
                .filter(|m| *m <= 0o7777)
                .ok_or_else(|| self.err(key, format!("{s:?} is not an octal mode like \"0444\""))),
        }
    }

    pub(super) fn mount(&self, m: RawMount) -> R<MountConfig> {
        Ok(MountConfig {
            source: m.source,
            mountpoint: m.mountpoint.map(PathBuf::from),
            metadata_ttl: m.metadata_ttl.map_or(defaults::METADATA_TTL, |d| d.0),
            negative_ttl: m.negative_ttl.map_or(defaults::NEGATIVE_TTL, |d| d.0),
            prefetch_files: match m.prefetch_files {
                None => defaults::PREFETCH_FILES,
                Some(n) if n <= 4096 => n,
                Some(n) => {
                    return Err(self.err(
                        "mount.prefetch_files",
                        format!("{n} is out of range 0..=4096"),
                    ))
                }
            },
            uid: m.uid,
            gid: m.gid,
            file_mode: self.mode("mount.file_mode", m.file_mode, 0o444)?,
            dir_mode: self.mode("mount.dir_mode", m.dir_mode, 0o555)?,
            allow_other: m.allow_other.unwrap_or(false),
            disk_cache: match (m.disk_cache, m.disk_cache_size) {
                (None, None) => None,
                (None, Some(_)) => {
                    return Err(self.err(
                        "mount.disk_cache_size",
                        "is set, so a mount.disk_cache directory is needed",
                    ))
                }
                (Some(d), _) if d.is_empty() => {
                    return Err(self.err("mount.disk_cache", "is empty"))
                }
                (Some(_), Some(s)) if s.0 < 64 << 20 => {
                    return Err(self.err(
                        "mount.disk_cache_size",
                        format!("{} is below the least useful size, 64MiB", s.0),
                    ))
                }
                (Some(d), s) => Some((
                    PathBuf::from(d),
                    s.map_or(defaults::MOUNT_DISK_CACHE, |s| s.0),
                )),
            },
            metadata: match m.metadata {
                None => MetadataSource::Cluster,
                Some(s) => s.parse().map_err(|e| self.err("mount.metadata", e))?,
            },
            splice_reads: m.splice_reads.unwrap_or(true),
        })
    }
}
