//! [`Versions`]: which version of an object a request means.
//!
//! A request pinned with `If-Match` names it (versions are immutable, so a known
//! ETag needs no revalidation). Otherwise the latest version learned within
//! `revalidate_after` is served, else the origin (or, on a gateway, the owner of
//! the object's block 0) is asked again, one question in flight however many ask.
//! Whatever is known is trusted for at most `max_age`, and a rule's `ttl` expires
//! it (the node then drops the object's blocks too).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use shoal::blocks::Flights;
use shoal::store::ObjectMeta;

use super::fetch::Source;
use super::version_log::{Restored, VersionLog};
use super::{NodeError, Via};

/// Object versions remembered; past this the map is cleared (it is only a cache).
const META_ENTRIES: usize = 100_000;

/// Who is asked for a version. Flights are kept apart by it, for the reason
/// block flights are kept apart by lane.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(super) enum Asked {
    Origin,
    /// The owner of block 0, by fetching it (a GET follows anyway).
    OwnerBlock,
    /// The owner of block 0, by a HEAD (no block moves).
    OwnerHead,
}

type Question = (String, String, Option<String>, Asked);

/// What is known of one object.
#[derive(Clone)]
struct Known {
    meta: ObjectMeta,
    /// When the origin last confirmed this version (revalidation, `max_age`).
    checked: Instant,
    /// When this version was first learned, which its blocks are no older than: a
    /// rule's `ttl` runs from here, however often the version is confirmed.
    since: Instant,
}

/// What the node may use of what it knows of an object.
pub(super) enum Fresh {
    /// This version, confirmed this long ago.
    Known(ObjectMeta, Duration),
    /// A rule's `ttl` ran out: the version and its blocks must go.
    Expired,
    Unknown,
}

pub(super) struct Versions {
    metas: Mutex<HashMap<(String, String), Known>>,
    /// Questions in flight, answered with the version and how long ago the
    /// origin confirmed it (zero but for a runner-up's copy).
    questions: Flights<Question, (ObjectMeta, Duration), NodeError>,
    pub revalidate_after: Duration,
    max_age: Duration,
    /// Beside the disk tier: what was known survives a restart with the blocks.
    log: Option<VersionLog>,
}

impl Versions {
    pub fn new(revalidate_after: Duration, max_age: Duration) -> Versions {
        Versions {
            metas: Mutex::new(HashMap::new()),
            questions: Flights::default(),
            revalidate_after,
            max_age,
            log: None,
        }
    }

    /// Keeps what is learned in `log`, starting from what it held: versions
    /// confirmed `age` ago, which requests naming them (`If-Match`, a
    /// runner-up's `only-if-cached` ask) use at once and any other request
    /// confirms with the origin first.
    pub fn with_log(mut self, log: VersionLog, restored: Vec<Restored>) -> Versions {
        {
            let mut metas = self.metas.lock().unwrap();
            let now = Instant::now();
            for r in restored {
                let Some(at) = now.checked_sub(r.age.max(self.revalidate_after)) else {
                    continue;
                };
                metas.insert(
                    (r.bucket, r.key),
                    Known {
                        meta: r.meta,
                        checked: at,
                        since: at,
                    },
                );
            }
        }
        self.log = Some(log);
        self
    }

    /// Rewrites the log with what is known now (at stop: the next start reads
    /// no more than that).
    pub fn save(&self) -> std::io::Result<usize> {
        let Some(log) = &self.log else { return Ok(0) };
        let metas = self.metas.lock().unwrap();
        rewrite(log, &metas)?;
        Ok(metas.len())
    }

    /// What is known of `bucket/key` and may still be used under a rule's `ttl`
    /// and `max_age`.
    pub fn fresh(&self, bucket: &str, key: &str, ttl: Option<Duration>) -> Fresh {
        let id = (bucket.to_owned(), key.to_owned());
        let Some(known) = self.metas.lock().unwrap().get(&id).cloned() else {
            return Fresh::Unknown;
        };
        if ttl.is_some_and(|ttl| known.since.elapsed() >= ttl) {
            return Fresh::Expired;
        }
        let age = known.checked.elapsed();
        if age < self.max_age {
            Fresh::Known(known.meta, age)
        } else {
            Fresh::Unknown
        }
    }

    /// Notes that the origin (or an owner) confirmed `meta` just now.
    pub fn remember(&self, bucket: &str, key: &str, meta: &ObjectMeta) {
        self.remember_aged(bucket, key, meta, Duration::ZERO);
    }

    /// Notes that the origin confirmed `meta` `age` ago (a runner-up's copy):
    /// it is revalidated that much sooner.
    pub fn remember_aged(&self, bucket: &str, key: &str, meta: &ObjectMeta, age: Duration) {
        let mut metas = self.metas.lock().unwrap();
        if metas.len() >= META_ENTRIES {
            metas.clear();
        }
        let now = Instant::now();
        let now = now.checked_sub(age).unwrap_or(now);
        let id = (bucket.to_owned(), key.to_owned());
        let since = match metas.get(&id) {
            Some(k) if k.meta.etag == meta.etag => k.since,
            _ => {
                if let Some(log) = &self.log {
                    log.learned(bucket, key, meta);
                }
                now
            }
        };
        metas.insert(
            id,
            Known {
                meta: meta.clone(),
                checked: now,
                since,
            },
        );
        if let Some(log) = self.log.as_ref().filter(|l| l.grown()) {
            if let Err(e) = rewrite(log, &metas) {
                tracing::warn!("cannot rewrite the versions log: {e}");
            }
        }
    }

    /// Asks `asked` for the version of `bucket/key` (pinned to `if_match`), once
    /// however many ask the same at the same time, and remembers the answer.
    pub async fn learn(
        &self,
        source: &Arc<Source>,
        (bucket, key): (&str, &str),
        if_match: Option<&str>,
        via: Via,
        asked: Asked,
    ) -> Result<ObjectMeta, NodeError> {
        let (b, k, m) = (
            bucket.to_owned(),
            key.to_owned(),
            if_match.map(str::to_owned),
        );
        let question = (b.clone(), k.clone(), m.clone(), asked);
        let source = source.clone();
        // What the asker would take from this node's own memory, it takes from
        // the runner-up's.
        let trusted = self.trusted(via);
        let ask =
            async move {
                match (asked, &source.upstream) {
                    // The owner of block 0 knows the version (and keeps block 0).
                    (Asked::OwnerBlock, Some(up)) => {
                        let (h, seen) = shoal::store::seen::cache_statuses(
                            up.reader
                                .open_forwarded(&b, &k, None, m.as_deref(), via.hop),
                        )
                        .await;
                        if let Some(owner) = seen.first() {
                            crate::access::trace::upstream(owner);
                        }
                        Ok((h?.meta().clone(), Duration::ZERO))
                    }
                    (Asked::OwnerHead, Some(up)) => Ok((
                        up.reader
                            .head_forwarded(&b, &k, m.as_deref(), via.hop)
                            .await?,
                        Duration::ZERO,
                    )),
                    _ => {
                        // An object whose block 0 moved here: its previous
                        // owner may know the version.
                        if let Some(p) = &source.peers {
                            let taken =
                                p.head(&b, &k, m.as_deref(), trusted, &source.metrics).await;
                            if let Some(known) = taken {
                                return Ok(known);
                            }
                        }
                        source.metrics.origin_request("head");
                        Ok((source.head(&b, &k, m).await?, Duration::ZERO))
                    }
                }
            };
        // The question is its asker's, wherever it runs.
        let ask = crate::access::trace::scope(crate::access::trace::current(), ask);
        let (meta, age) = self.questions.run(question, ask).await.0?;
        self.remember_aged(bucket, key, &meta, age);
        Ok(meta)
    }

    /// How long ago a version may have been confirmed to answer `via`: an
    /// asker that takes metadata older than `revalidate_after` takes a version
    /// known that long, and one that says `max-age` no older than that.
    pub fn trusted(&self, via: Via) -> Duration {
        via.bounded(self.revalidate_after.max(via.accept.unwrap_or_default()))
    }

    /// The version `etag` of an object, if this node knows it already.
    pub fn known(&self, bucket: &str, key: &str, etag: &str) -> Option<ObjectMeta> {
        let metas = self.metas.lock().unwrap();
        let k = metas.get(&(bucket.to_owned(), key.to_owned()))?;
        (k.meta.etag == etag && k.checked.elapsed() < self.max_age).then(|| k.meta.clone())
    }

    /// Forgets what is known of an object (it changed at the origin); says
    /// whether anything was.
    pub fn forget(&self, bucket: &str, key: &str) -> bool {
        let known = self
            .metas
            .lock()
            .unwrap()
            .remove(&(bucket.to_owned(), key.to_owned()))
            .is_some();
        if let Some(log) = self.log.as_ref().filter(|_| known) {
            log.forgot(bucket, key);
        }
        known
    }

    /// Forgets the known version of an object unless it is `etag`.
    pub fn forget_unless(&self, bucket: &str, key: &str, etag: &str) {
        let mut metas = self.metas.lock().unwrap();
        let id = (bucket.to_owned(), key.to_owned());
        if metas.get(&id).is_some_and(|k| k.meta.etag != etag) {
            metas.remove(&id);
            if let Some(log) = &self.log {
                log.forgot(bucket, key);
            }
        }
    }

    /// Forgets every known version under a prefix.
    pub fn forget_prefix(&self, bucket: &str, prefix: &str) {
        self.metas
            .lock()
            .unwrap()
            .retain(|(b, k), _| !(b == bucket && k.starts_with(prefix)));
        if let Some(log) = &self.log {
            log.forgot(bucket, prefix);
        }
    }
}

fn rewrite(log: &VersionLog, metas: &HashMap<(String, String), Known>) -> std::io::Result<()> {
    log.rewrite(
        metas
            .iter()
            .map(|((b, k), v)| (b.as_str(), k.as_str(), &v.meta, v.checked.elapsed())),
    )
}
