//! What S3 checks before it reads a request's operation, for the cases a client
//! must get right: temporary credentials (the session token, its expiry), the
//! bucket's region, requester pays and the expected bucket owner. Checked ahead
//! of the S3 service, which then verifies the signature.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use http::{HeaderMap, StatusCode};

/// A bucket's settings beyond its objects.
#[derive(Clone, Debug, Default)]
pub struct BucketPolicy {
    /// Requests must be signed for this region (default: any).
    pub region: Option<String>,
    /// Requests must carry `x-amz-request-payer: requester`.
    pub requester_pays: bool,
    /// Requests must carry `x-amz-expected-bucket-owner` with this account.
    pub owner: Option<String>,
}

/// A temporary key: its session token, and when it stops working.
#[derive(Clone, Debug)]
struct Session {
    token: String,
    expires: Option<SystemTime>,
}

/// The policies and sessions; clones share them.
#[derive(Clone, Default)]
pub struct Policy {
    buckets: Arc<RwLock<HashMap<String, BucketPolicy>>>,
    sessions: Arc<RwLock<HashMap<String, Session>>>,
    /// Keys that may use only these buckets (a role's permissions).
    scopes: Arc<RwLock<HashMap<String, Vec<String>>>>,
}

/// An answer refusing a request, as S3 gives it.
pub struct Refusal {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// `x-amz-bucket-region`, and `<Region>` in the body.
    pub region: Option<String>,
}

impl Policy {
    pub fn set_bucket(&self, bucket: &str, p: BucketPolicy) {
        self.buckets.write().unwrap().insert(bucket.to_owned(), p);
    }

    /// Requests signed with `access_key` must carry `token` and stop working at
    /// `expires`.
    pub fn add_session(&self, access_key: &str, token: &str, expires: Option<SystemTime>) {
        self.sessions.write().unwrap().insert(
            access_key.to_owned(),
            Session {
                token: token.to_owned(),
                expires,
            },
        );
    }

    /// Requests signed with `access_key` may use only `buckets`; any other is
    /// AccessDenied, as for a role whose policy names only those.
    pub fn scope_key(&self, access_key: &str, buckets: &[String]) {
        self.scopes
            .write()
            .unwrap()
            .insert(access_key.to_owned(), buckets.to_vec());
    }

    /// Ends every session now, as if their tokens had all expired early: the
    /// next request with each gets `ExpiredToken`.
    pub fn expire_sessions(&self) {
        let now = SystemTime::now();
        for s in self.sessions.write().unwrap().values_mut() {
            s.expires = Some(now);
        }
    }

    /// `None` if the request may go on to the S3 service.
    pub fn check(&self, bucket: &str, headers: &HeaderMap, query: &str) -> Option<Refusal> {
        let q = |name: &str| query_value(query, name);
        let credential = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|a| a.split("Credential=").nth(1))
            .map(|c| c.split([',', ' ']).next().unwrap_or("").to_owned())
            .or_else(|| q("X-Amz-Credential"));
        // AKID/date/region/s3/aws4_request
        let scope: Vec<String> = credential
            .map(|c| c.split('/').map(str::to_owned).collect())
            .unwrap_or_default();
        let access_key = scope.first().cloned();
        let signed_region = scope.get(2).cloned();
        if let Some(ak) = &access_key {
            let session = self.sessions.read().unwrap().get(ak).cloned();
            if let Some(s) = session {
                let sent = headers
                    .get("x-amz-security-token")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
                    .or_else(|| q("X-Amz-Security-Token"));
                if sent.as_deref() != Some(s.token.as_str()) {
                    return Some(refuse(
                        StatusCode::FORBIDDEN,
                        "InvalidToken",
                        "The provided token is malformed or otherwise invalid.",
                    ));
                }
                if s.expires.is_some_and(|e| e <= SystemTime::now()) {
                    return Some(refuse(
                        StatusCode::BAD_REQUEST,
                        "ExpiredToken",
                        "The provided token has expired.",
                    ));
                }
            }
        }
        if let Some(ak) = &access_key {
            let scopes = self.scopes.read().unwrap();
            if scopes
                .get(ak)
                .is_some_and(|b| !b.iter().any(|b| b == bucket))
            {
                return Some(refuse(
                    StatusCode::FORBIDDEN,
                    "AccessDenied",
                    "Access Denied",
                ));
            }
        }
        let p = self.buckets.read().unwrap().get(bucket).cloned()?;
        if let (Some(want), Some(got)) = (&p.region, &signed_region) {
            if want != got {
                return Some(Refusal {
                    status: StatusCode::BAD_REQUEST,
                    code: "AuthorizationHeaderMalformed",
                    message: format!(
                        "The authorization header is malformed; the region '{got}' is wrong; expecting '{want}'"
                    ),
                    region: Some(want.clone()),
                });
            }
        }
        let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
        if p.requester_pays && header("x-amz-request-payer") != Some("requester") {
            return Some(refuse(
                StatusCode::FORBIDDEN,
                "AccessDenied",
                "Access Denied",
            ));
        }
        if let Some(owner) = &p.owner {
            if header("x-amz-expected-bucket-owner") != Some(owner.as_str()) {
                return Some(refuse(
                    StatusCode::FORBIDDEN,
                    "AccessDenied",
                    "Access Denied",
                ));
            }
        }
        None
    }
}

fn refuse(status: StatusCode, code: &'static str, message: &str) -> Refusal {
    Refusal {
        status,
        code,
        message: message.to_owned(),
        region: None,
    }
}

fn query_value(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == name).then(|| {
            percent_encoding::percent_decode_str(v)
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}
