//! Credentials that sign origin requests: fixed keys from the config, or the AWS
//! SDK's own providers (`aws-config`) in the SDK's default order, behind a cache
//! that refreshes before they expire.
//!
//! The chain, when the config names no keys: environment variables; the shared
//! `config`/`credentials` files (a `profile` with keys, `role_arn` with
//! `source_profile` or `credential_source`, `credential_process`, SSO); web
//! identity (`AWS_WEB_IDENTITY_TOKEN_FILE`: EKS IRSA); container credentials
//! (`AWS_CONTAINER_CREDENTIALS_*`: ECS task roles, EKS Pod Identity); EC2 instance
//! metadata (IMDSv2). With `profile = "..."` only that profile is asked. Each
//! provider runs with its own endpoint overrides from the environment
//! (`AWS_ENDPOINT_URL_STS`, `AWS_EC2_METADATA_SERVICE_ENDPOINT`, ...).
//!
//! One [`CredentialSource`] per (profile, region) per process: the mount's
//! metadata client, its fallback reads and a node's origin client share it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_credential_types::Credentials as AwsCredentials;
use aws_smithy_runtime_api::client::http::SharedHttpClient;

use crate::net::Network;

use std::fmt;

/// A resolved S3 key pair. `Debug` never prints the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// How requests are signed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CredentialMode {
    Keys(Credentials),
    /// Unsigned requests, only when asked for with `anonymous = true`.
    Anonymous,
    /// The AWS SDK's default chain, or only `profile` of the shared files:
    /// fetched at start and refreshed before they expire.
    Chain {
        profile: Option<String>,
    },
}

/// Refresh this long before expiry at most (the SDK's own margin)...
const REFRESH_MARGIN: Duration = Duration::from_secs(300);

/// Why no credentials could be had.
#[derive(Debug, Clone, thiserror::Error)]
#[error("no credentials for the origin: {0}")]
pub struct CredentialsUnavailable(pub String);

/// Process-wide counts, for `/metrics`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CredentialStats {
    /// Credentials fetched from a provider (the first time, and each refresh).
    pub fetches: u64,
    /// Refreshes forced by an origin answering that the token expired.
    pub forced: u64,
}

static FETCHES: AtomicU64 = AtomicU64::new(0);
static FORCED: AtomicU64 = AtomicU64::new(0);

pub fn stats() -> CredentialStats {
    CredentialStats {
        fetches: FETCHES.load(Relaxed),
        forced: FORCED.load(Relaxed),
    }
}

/// Sources by (profile, region, network).
type Shared = HashMap<(Option<String>, String, Network), Arc<CredentialSource>>;

struct Held {
    creds: AwsCredentials,
    /// Past this, a request starts a refresh (and still signs with these).
    refresh_at: Option<SystemTime>,
}

enum Kind {
    Fixed(AwsCredentials),
    Chain(Chain),
}

pub struct CredentialSource {
    kind: Kind,
    held: Mutex<Option<Arc<Held>>>,
    /// One fetch at a time; the others wait for its result.
    fetching: tokio::sync::Mutex<()>,
    /// A whole fetch (every provider tried) gives up after this.
    deadline: Duration,
}

impl std::fmt::Debug for CredentialSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Fixed(c) => write!(f, "CredentialSource::Fixed({})", c.access_key_id()),
            Kind::Chain(c) => write!(f, "CredentialSource::Chain({:?})", c.profile),
        }
    }
}

impl CredentialSource {
    /// Keys written in the config: never refreshed.
    pub fn fixed(c: &Credentials) -> Arc<CredentialSource> {
        let creds = AwsCredentials::new(
            c.access_key_id.clone(),
            c.secret_access_key.clone(),
            c.session_token.clone(),
            None,
            "shoal-config",
        );
        Arc::new(CredentialSource {
            kind: Kind::Fixed(creds),
            held: Mutex::new(None),
            fetching: tokio::sync::Mutex::new(()),
            deadline: Duration::ZERO,
        })
    }

    /// The SDK chain (or only `profile`), shared by everyone in this process who
    /// asks for the same profile and region. `deadline` bounds each fetch.
    pub fn chain(
        profile: Option<&str>,
        region: &str,
        network: &Network,
        deadline: Duration,
    ) -> Result<Arc<CredentialSource>, String> {
        static SHARED: OnceLock<Mutex<Shared>> = OnceLock::new();
        let key = (
            profile.map(str::to_owned),
            region.to_owned(),
            network.clone(),
        );
        let mut all = SHARED.get_or_init(Default::default).lock().unwrap();
        if let Some(s) = all.get(&key) {
            return Ok(s.clone());
        }
        let source = Arc::new(CredentialSource {
            kind: Kind::Chain(Chain::new(
                profile,
                region,
                super::http::provider_client(network, deadline)?,
            )),
            held: Mutex::new(None),
            fetching: tokio::sync::Mutex::new(()),
            deadline,
        });
        all.insert(key, source.clone());
        Ok(source)
    }

    pub fn refreshes(&self) -> bool {
        matches!(self.kind, Kind::Chain(_))
    }

    /// Credentials to sign with now. Past the refresh point a refresh starts in the
    /// background and these are used meanwhile; expired ones are fetched anew first.
    pub async fn current(self: &Arc<Self>) -> Result<AwsCredentials, CredentialsUnavailable> {
        if let Kind::Fixed(c) = &self.kind {
            return Ok(c.clone());
        }
        let now = SystemTime::now();
        if let Some(h) = self.held() {
            let expired = h.creds.expiry().is_some_and(|e| e <= now);
            let due = h.refresh_at.is_some_and(|r| r <= now);
            if !expired {
                if due {
                    let me = self.clone();
                    let stale = h.creds.clone();
                    tokio::spawn(async move {
                        if let Ok(_guard) = me.fetching.try_lock() {
                            if me.held().is_some_and(|h| h.creds == stale) {
                                if let Err(e) = me.fetch().await {
                                    tracing::warn!("refreshing origin credentials failed, using the current ones until they expire: {e}");
                                }
                            }
                        }
                    });
                }
                return Ok(h.creds.clone());
            }
        }
        self.refetch(None).await
    }

    /// The origin refused `stale` as expired: fetch anew (once, however many ask
    /// with the same stale credentials).
    pub async fn refresh_after(
        self: &Arc<Self>,
        stale: &AwsCredentials,
    ) -> Result<AwsCredentials, CredentialsUnavailable> {
        if !self.refreshes() {
            return Err(CredentialsUnavailable(
                "the origin says the session token in the config has expired".into(),
            ));
        }
        FORCED.fetch_add(1, Relaxed);
        self.refetch(Some(stale)).await
    }

    async fn refetch(
        &self,
        stale: Option<&AwsCredentials>,
    ) -> Result<AwsCredentials, CredentialsUnavailable> {
        let _guard = self.fetching.lock().await;
        // Someone else fetched while we waited.
        if let Some(h) = self.held() {
            let fresh = match stale {
                Some(s) => &h.creds != s,
                None => h.creds.expiry().is_none_or(|e| e > SystemTime::now()),
            };
            if fresh {
                return Ok(h.creds.clone());
            }
        }
        self.fetch().await
    }

    fn held(&self) -> Option<Arc<Held>> {
        self.held.lock().unwrap().clone()
    }

    async fn fetch(&self) -> Result<AwsCredentials, CredentialsUnavailable> {
        let Kind::Chain(chain) = &self.kind else {
            unreachable!("fixed credentials are never fetched")
        };
        let creds = match tokio::time::timeout(self.deadline, chain.provide()).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(CredentialsUnavailable(format!(
                    "{} gave no answer within {:?}",
                    chain.describe(),
                    self.deadline
                )))
            }
        };
        FETCHES.fetch_add(1, Relaxed);
        let now = SystemTime::now();
        let refresh_at = creds.expiry().map(|e| {
            let left = e.duration_since(now).unwrap_or_default();
            e - REFRESH_MARGIN.min(left / 2)
        });
        tracing::debug!(
            access_key = creds.access_key_id(),
            expires = ?creds.expiry(),
            "origin credentials fetched"
        );
        *self.held.lock().unwrap() = Some(Arc::new(Held {
            creds: creds.clone(),
            refresh_at,
        }));
        Ok(creds)
    }
}

/// The SDK's providers in the SDK's order, each named, so that a failure can say
/// what was tried and why each gave nothing.
struct Chain {
    profile: Option<String>,
    region: String,
    http: SharedHttpClient,
    providers: tokio::sync::OnceCell<Vec<(&'static str, SharedCredentialsProvider)>>,
}

impl Chain {
    fn new(profile: Option<&str>, region: &str, http: SharedHttpClient) -> Chain {
        Chain {
            profile: profile.map(str::to_owned),
            region: region.to_owned(),
            http,
            providers: tokio::sync::OnceCell::new(),
        }
    }

    fn describe(&self) -> String {
        match &self.profile {
            Some(p) => format!("profile {p:?}"),
            None => "the AWS credential chain".into(),
        }
    }

    async fn providers(&self) -> &[(&'static str, SharedCredentialsProvider)] {
        self.providers
            .get_or_init(|| async {
                use aws_config::provider_config::ProviderConfig;
                let conf = ProviderConfig::default()
                    .with_http_client(self.http.clone())
                    .with_region(Some(aws_config::Region::new(self.region.clone())));
                let mut profile = aws_config::profile::ProfileFileCredentialsProvider::builder()
                    .configure(&conf);
                if let Some(p) = &self.profile {
                    profile = profile.profile_name(p);
                }
                let profile = SharedCredentialsProvider::new(profile.build());
                if self.profile.is_some() {
                    return vec![("profile", profile)];
                }
                vec![
                    (
                        "environment",
                        SharedCredentialsProvider::new(
                            aws_config::environment::EnvironmentVariableCredentialsProvider::new(),
                        ),
                    ),
                    ("shared config and credentials files", profile),
                    (
                        "web identity token",
                        SharedCredentialsProvider::new(
                            aws_config::web_identity_token::WebIdentityTokenCredentialsProvider::builder()
                                .configure(&conf)
                                .build(),
                        ),
                    ),
                    (
                        "container credentials (ECS, EKS Pod Identity)",
                        SharedCredentialsProvider::new(
                            aws_config::ecs::EcsCredentialsProvider::builder()
                                .configure(&conf)
                                .build(),
                        ),
                    ),
                    (
                        "EC2 instance metadata",
                        SharedCredentialsProvider::new(
                            aws_config::imds::credentials::ImdsCredentialsProvider::builder()
                                .configure(&conf)
                                .build(),
                        ),
                    ),
                ]
            })
            .await
    }

    /// The first provider that is set up answers; one that is set up but fails
    /// ends the search (as the SDK does: a broken role must not fall through to
    /// the instance's own).
    async fn provide(&self) -> Result<AwsCredentials, CredentialsUnavailable> {
        let mut tried = Vec::new();
        for (name, p) in self.providers().await {
            match p.provide_credentials().await {
                Ok(c) => return Ok(c),
                Err(e @ CredentialsError::CredentialsNotLoaded(_)) => {
                    tried.push(format!("{name}: {}", causes(&e)));
                }
                Err(e) => {
                    tried.push(format!("{name} failed: {}", causes(&e)));
                    return Err(CredentialsUnavailable(tried.join("; ")));
                }
            }
        }
        Err(CredentialsUnavailable(format!(
            "tried {}",
            tried.join("; ")
        )))
    }
}

/// An error and every cause under it, on one line.
fn causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let s_text = s.to_string();
        if !out.contains(&s_text) {
            out.push_str(": ");
            out.push_str(&s_text);
        }
        src = s.source();
    }
    out
}
