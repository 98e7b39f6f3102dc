//! The plugin's own metrics (prefix `shoal_csi_`): what it keeps (volumes,
//! mounts, shares, binds), what it did (launches, failed calls by reason,
//! handovers, token copies) and each mount's version beside the driver's. Every
//! labelled family is on the page from the start with its known labels at 0.
//! [`crate::scrape`] serves them with every mount's own.

use std::collections::BTreeSet;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::error::CsiError;

/// The Node calls a failure is counted under.
pub const CALLS: &[&str] = &["publish", "unpublish", "stage", "unstage", "stats"];
/// Why a call failed: [`reason`] of its error.
pub const REASONS: &[&str] = &[
    "invalid",
    "already_exists",
    "not_found",
    "mount",
    "internal",
];

/// A failure's reason, as counted.
pub fn reason(e: &CsiError) -> &'static str {
    match e {
        CsiError::Invalid(_) => "invalid",
        CsiError::AlreadyExists(_) => "already_exists",
        CsiError::NotFound(_) => "not_found",
        CsiError::Mount(_) => "mount",
        CsiError::Internal(_) => "internal",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Failure {
    pub call: &'static str,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Outcome {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BindKind {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MountVersion {
    pub volume: String,
    /// Where the mount is: a share's path, or the target of a mount of its own.
    pub mount: String,
    pub version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Version {
    pub version: String,
}

pub struct Metrics {
    pub volumes: Gauge,
    pub mounts: Gauge,
    pub shares: Gauge,
    pub binds: Family<BindKind, Gauge>,
    pub launches: Family<Outcome, Counter>,
    pub failures: Family<Failure, Counter>,
    pub handovers: Family<Outcome, Counter>,
    pub handover_seconds: Histogram,
    pub mount_version: Family<MountVersion, Gauge>,
    pub driver_version: Family<Version, Gauge>,
    pub mounts_behind: Gauge,
    pub token_copies: Family<Outcome, Counter>,
    pub mount_scrapes: Family<Outcome, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let m = Metrics {
            volumes: Default::default(),
            mounts: Default::default(),
            shares: Default::default(),
            binds: Default::default(),
            launches: Default::default(),
            failures: Default::default(),
            handovers: Default::default(),
            handover_seconds: Histogram::new(exponential_buckets(0.05, 2.0, 12)),
            mount_version: Default::default(),
            driver_version: Default::default(),
            mounts_behind: Default::default(),
            token_copies: Default::default(),
            mount_scrapes: Default::default(),
        };
        for call in CALLS {
            for reason in REASONS {
                let _ = m.failures.get_or_create(&Failure { call, reason });
            }
        }
        for kind in ["stage", "publish"] {
            let _ = m.binds.get_or_create(&BindKind { kind });
        }
        for result in ["started", "failed"] {
            let _ = m.launches.get_or_create(&Outcome { result });
        }
        for result in ["done", "failed"] {
            let _ = m.handovers.get_or_create(&Outcome { result });
        }
        for result in ["copied", "failed"] {
            let _ = m.token_copies.get_or_create(&Outcome { result });
        }
        for result in ["ok", "failed"] {
            let _ = m.mount_scrapes.get_or_create(&Outcome { result });
        }
        m
    }
}

impl Metrics {
    pub fn register(&self, r: &mut Registry) {
        let p = r.sub_registry_with_prefix("shoal_csi");
        shoal::register_metrics!(p,
            "volumes" => self.volumes, "Volumes staged or published on this node";
            "mounts" => self.mounts, "Mounts this plugin keeps (shares, and mounts of their own)";
            "shares" => self.shares, "Mounts shared by the stages and publishes of one volume, options and identity";
            "binds" => self.binds, "Bind mounts of shares, by kind (stage, publish)";
            "launches" => self.launches, "Mounts started, by result";
            "failures" => self.failures, "Node calls failed, by call and reason";
            "handovers" => self.handovers, "Mounts handed over to the driver's shoal-mount, by result";
            "handover_seconds" => self.handover_seconds, "How long a mount's handover to the driver's shoal-mount took";
            "mount_version" => self.mount_version, "Each mount's shoal-mount (version+digest of its server's executable), 1";
            "driver_version" => self.driver_version, "The shoal-mount this plugin starts mounts with, 1";
            "mounts_behind" => self.mounts_behind, "Mounts served by another shoal-mount than the driver's";
            "token_copies" => self.token_copies, "Copies of the driver's tokens written for its mounts (kubelet rotated them), by result";
            "mount_scrapes" => self.mount_scrapes, "Mounts' metrics gathered for a scrape, by result";
        );
    }

    pub fn failure(&self, call: &'static str, e: &CsiError) {
        self.failures
            .get_or_create(&Failure {
                call,
                reason: reason(e),
            })
            .inc();
    }

    pub fn launched(&self, ok: bool) {
        let result = if ok { "started" } else { "failed" };
        self.launches.get_or_create(&Outcome { result }).inc();
    }

    /// Sets the per-mount versions to `mounts` (volume, mount, version) alone,
    /// and how many differ from `driver`.
    pub fn set_versions(&self, driver: Option<&str>, mounts: &[(String, String, String)]) {
        self.mount_version.clear();
        let mut behind = 0;
        for (volume, mount, version) in mounts {
            self.mount_version
                .get_or_create(&MountVersion {
                    volume: volume.clone(),
                    mount: mount.clone(),
                    version: version.clone(),
                })
                .set(1);
            if driver.is_some_and(|d| d != version) {
                behind += 1;
            }
        }
        self.mounts_behind.set(behind);
        self.driver_version.clear();
        if let Some(d) = driver {
            self.driver_version
                .get_or_create(&Version {
                    version: d.to_owned(),
                })
                .set(1);
        }
    }

    /// Sets what the plugin keeps: `volumes` (distinct ids), mounts, shares,
    /// and binds of each kind.
    pub fn set_kept(
        &self,
        volumes: &BTreeSet<String>,
        mounts: usize,
        shares: usize,
        binds: (usize, usize),
    ) {
        self.volumes.set(volumes.len() as i64);
        self.mounts.set(mounts as i64);
        self.shares.set(shares as i64);
        self.binds
            .get_or_create(&BindKind { kind: "stage" })
            .set(binds.0 as i64);
        self.binds
            .get_or_create(&BindKind { kind: "publish" })
            .set(binds.1 as i64);
    }
}
