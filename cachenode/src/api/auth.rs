//! Who may use the node: the SigV4 keys of `[auth]` (an unknown one answered as S3
//! answers it), and what each may do, checked for every S3 operation here and for
//! the node's own routes in [`super::Routes`].

use std::collections::HashMap;
use std::sync::Arc;

use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::dto::DeleteObjectsInput;
use s3s::{s3_error, S3Request, S3Result};
use shoal::config::AuthKey;
use shoal::scope::Action;

use super::error::{refusal, refusal_code};
use crate::access::{classify, trace, Ask, Policy, RefusalLabel, Request};
use crate::metrics::Metrics;

pub struct NodeAuth(HashMap<String, SecretKey>);

impl NodeAuth {
    pub fn new(keys: &[AuthKey]) -> NodeAuth {
        NodeAuth(
            keys.iter()
                .map(|k| {
                    let c = &k.credentials;
                    (c.access_key_id.clone(), c.secret_access_key.clone().into())
                })
                .collect(),
        )
    }
}

#[async_trait::async_trait]
impl S3Auth for NodeAuth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        self.0.get(access_key).cloned().ok_or_else(|| {
            s3_error!(
                InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records."
            )
        })
    }
}

/// The policy as the S3 layer and the routes ask it: notes the signer on the
/// request's trace, counts and notes refusals.
#[derive(Clone)]
pub struct Gate {
    pub policy: Arc<Policy>,
    pub metrics: Arc<Metrics>,
}

impl Gate {
    /// Scope and rates.
    pub fn admit(&self, key: Option<&str>, req: &Request) -> S3Result<()> {
        if let Some(k) = key {
            trace::signed_by(k);
        }
        let r = self.policy.admit(key, req);
        if let (Ok(()), Some(k)) = (&r, key) {
            self.metrics
                .key_requests
                .get_or_create(&crate::metrics::KeyLabel { key: k.to_owned() })
                .inc();
        }
        self.answer(key, r)
    }

    /// Scope alone (the rest of a request already admitted).
    pub fn check(&self, key: Option<&str>, req: &Request) -> S3Result<()> {
        self.answer(key, self.policy.check(key, req))
    }

    fn answer(&self, key: Option<&str>, r: Result<(), crate::access::Refusal>) -> S3Result<()> {
        let Err(e) = r else { return Ok(()) };
        let code = refusal_code(&e);
        trace::refused(code);
        let reason = match &e {
            crate::access::Refusal::Anonymous => "unsigned",
            crate::access::Refusal::OutOfScope { .. } => "scope",
            crate::access::Refusal::OverLimit { limit, .. } => limit.name(),
        };
        self.metrics
            .refusals
            .get_or_create(&RefusalLabel {
                key: key.unwrap_or("").to_owned(),
                reason,
            })
            .inc();
        tracing::debug!("refused: {e}");
        Err(refusal(&e))
    }
}

#[async_trait::async_trait]
impl S3Access for Gate {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let key = cx.credentials().map(|c| c.access_key.clone());
        let (bucket, object) = match cx.s3_path() {
            s3s::path::S3Path::Root => (None, None),
            s3s::path::S3Path::Bucket { bucket } => (Some(&**bucket), None),
            s3s::path::S3Path::Object { bucket, key } => (Some(&**bucket), Some(&**key)),
        };
        let req = classify::op(cx.s3_op().name(), bucket, object);
        self.admit(key.as_deref(), &req)
    }

    async fn delete_objects(&self, req: &mut S3Request<DeleteObjectsInput>) -> S3Result<()> {
        let key = req.credentials.as_ref().map(|c| c.access_key.clone());
        let i = &req.input;
        let asks = i
            .delete
            .objects
            .iter()
            .map(|o| Ask::key(Action::Write, &i.bucket, &o.key))
            .collect();
        Gate::check(self, key.as_deref(), &Request::All(asks))
    }
}
