//! Who may do what on this node, how fast, and the record of what each did.
//!
//! [`Policy`] holds every accepted key's [`Scope`] and [`limits::Limiter`]; a
//! request is turned into what it asks ([`Ask`], by [`classify`]) and checked
//! before any byte is read or any origin request made, whichever way it came in
//! (an S3 operation, through [`NodeAccess`], or one of the node's own routes).
//! [`trace`] gathers what a request did, [`log`] writes it down.

pub mod classify;
pub mod limits;
pub mod log;
pub mod record;
pub mod trace;
pub mod write_kind;

use std::collections::HashMap;

use prometheus_client::encoding::EncodeLabelSet;
use shoal::config::AuthKey;
use shoal::scope::{Action, Scope, Target};

use limits::{Limit, Limiter};

/// One thing a request does, on one resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ask {
    pub action: Action,
    pub on: On,
}

/// The resource of an [`Ask`], owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum On {
    Service,
    Bucket(String),
    Key(String, String),
    Prefix(String, String),
}

impl Ask {
    pub fn key(action: Action, bucket: &str, key: &str) -> Ask {
        Ask {
            action,
            on: On::Key(bucket.to_owned(), key.to_owned()),
        }
    }
    pub fn prefix(action: Action, bucket: &str, prefix: &str) -> Ask {
        Ask {
            action,
            on: On::Prefix(bucket.to_owned(), prefix.to_owned()),
        }
    }
    pub fn bucket(action: Action, bucket: &str) -> Ask {
        Ask {
            action,
            on: On::Bucket(bucket.to_owned()),
        }
    }
    fn target(&self) -> Target<'_> {
        match &self.on {
            On::Service => Target::Service,
            On::Bucket(b) => Target::Bucket(b),
            On::Key(b, k) => Target::Key(b, k),
            On::Prefix(b, p) => Target::Prefix(b, p),
        }
    }
}

impl std::fmt::Display for Ask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.on {
            On::Service => write!(f, "{} of the service", self.action),
            On::Bucket(b) => write!(f, "{} of bucket {b}", self.action),
            On::Key(b, k) => write!(f, "{} of {b}/{k}", self.action),
            On::Prefix(b, p) => write!(f, "{} of {b}/{p}*", self.action),
        }
    }
}

/// What a request asks, as a whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Every one of these.
    All(Vec<Ask>),
    /// Learning where a bucket is (HeadBucket, GetBucketLocation): any grant in
    /// the bucket will do, as SDKs ask it before their first read.
    Locate(String),
    /// A purge applied on this node only (`shoal-local`): what the nodes pass on
    /// to each other, so the cluster's own key may, as may any purge grant.
    LocalPurge(Vec<Ask>),
}

/// Why a request was refused before it ran.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    #[error("the request is not signed")]
    Anonymous,
    #[error("key {key} may not {ask}")]
    OutOfScope { key: String, ask: String },
    #[error("key {key} is over its {} limit", limit.name())]
    OverLimit { key: String, limit: Limit },
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabel {
    pub key: String,
    pub reason: &'static str,
}

struct Rights {
    scope: Scope,
    /// The cluster's own key: what forwarding needs (read, list, local purges).
    forwarding: bool,
    limiter: Option<Limiter>,
}

pub struct Policy {
    keys: HashMap<String, Rights>,
}

impl Policy {
    /// The rights of `keys`; `cluster_key` is the key this node's `[cluster]`
    /// signs with, the one the nodes (and by default the mounts) use.
    pub fn new(keys: &[AuthKey], cluster_key: Option<&str>) -> Policy {
        let keys = keys
            .iter()
            .map(|k| {
                let id = k.credentials.access_key_id.clone();
                let forwarding = cluster_key == Some(id.as_str());
                let scope = k.allow.clone().unwrap_or_else(Scope::unscoped);
                let rights = Rights {
                    scope,
                    forwarding,
                    limiter: Limiter::new(&k.limits),
                };
                (id, rights)
            })
            .collect();
        Policy { keys }
    }

    /// Checks `req` signed by `key` (`None`: unsigned) against the key's scope,
    /// then its rates.
    pub fn admit(&self, key: Option<&str>, req: &Request) -> Result<(), Refusal> {
        let (key, r) = self.allowed(key, req)?;
        if let Some(l) = &r.limiter {
            l.admit().map_err(|limit| Refusal::OverLimit {
                key: key.to_owned(),
                limit,
            })?;
        }
        Ok(())
    }

    /// Checks `req` against the scope of the key it was signed with, alone.
    pub fn check(&self, key: Option<&str>, req: &Request) -> Result<(), Refusal> {
        self.allowed(key, req).map(drop)
    }

    fn allowed<'k>(
        &self,
        key: Option<&'k str>,
        req: &Request,
    ) -> Result<(&'k str, &Rights), Refusal> {
        let Some(key) = key else {
            return Err(Refusal::Anonymous);
        };
        // A key the signature check accepted is always listed here.
        let Some(r) = self.keys.get(key) else {
            return Err(Refusal::Anonymous);
        };
        let refuse = |ask: &Ask| Refusal::OutOfScope {
            key: key.to_owned(),
            ask: ask.to_string(),
        };
        let first_refused = |asks: &[Ask]| {
            asks.iter()
                .find(|a| !r.scope.allows(a.action, a.target()))
                .map(refuse)
        };
        let refused = match req {
            Request::All(asks) => first_refused(asks),
            Request::Locate(b) => (!r.scope.touches(b) && !r.forwarding)
                .then(|| refuse(&Ask::bucket(Action::List, b))),
            Request::LocalPurge(_) if r.forwarding => None,
            Request::LocalPurge(asks) => first_refused(asks),
        };
        match refused {
            Some(e) => Err(e),
            None => Ok((key, r)),
        }
    }

    /// Whether any key has a byte rate: else no answer needs its bytes counted.
    pub fn charges_any(&self) -> bool {
        self.keys
            .values()
            .any(|r| r.limiter.as_ref().is_some_and(Limiter::limits_bytes))
    }

    /// Whether `key` has a byte rate, so its answers' bytes are worth charging.
    pub fn charges_bytes(&self, key: &str) -> bool {
        self.keys
            .get(key)
            .and_then(|r| r.limiter.as_ref())
            .is_some_and(Limiter::limits_bytes)
    }

    /// The bytes an admitted request of `key` sent.
    pub fn spend_bytes(&self, key: &str, n: u64) {
        if let Some(l) = self.keys.get(key).and_then(|r| r.limiter.as_ref()) {
            l.spend_bytes(n);
        }
    }

    /// What keys with no `allow` list may no longer do, said once at start:
    /// before scopes every key could purge and, on a gateway, write.
    pub fn log_upgrade(keys: &[AuthKey], cluster_key: Option<&str>, writes: bool) {
        for k in keys.iter().filter(|k| k.allow.is_none()) {
            let id = &k.credentials.access_key_id;
            let lost = if writes { "purge or write" } else { "purge" };
            let forwarding = if cluster_key == Some(id.as_str()) {
                " (as the cluster's key it also passes purges on between nodes)"
            } else {
                ""
            };
            tracing::warn!(
                "auth key {id} has no allow list: it may read and list everything but no longer {lost}{forwarding}; grant more with allow = [\"purge:BUCKET\", ...]"
            );
        }
    }
}
