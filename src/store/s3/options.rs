//! What shapes an [`super::S3Client`]: its endpoint, signing, deadlines, retries,
//! network and the headers some buckets want. Its own types: the config converts
//! into them ([`crate::config::OriginConfig::client_options`]).

use std::time::Duration;

use crate::aws::credentials::CredentialMode;
use crate::aws::endpoint::AwsEndpoint;
use crate::net::Network;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Addressing {
    /// `https://endpoint/bucket/key`
    Path,
    /// `https://bucket.endpoint/key`
    Virtual,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    pub first_byte: Duration,
    /// Longest gap between two body chunks.
    pub stall: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, including the first.
    pub max_attempts: u32,
    pub base: Duration,
    pub max: Duration,
}

/// Headers S3 wants on every request to some buckets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestOptions {
    /// `x-amz-request-payer: requester`.
    pub requester_pays: bool,
    /// `x-amz-expected-bucket-owner`: the account that must own the bucket.
    pub expected_bucket_owner: Option<String>,
    /// An SSE-C key: objects encrypted with it are read with it.
    pub sse_customer_key: Option<SseCustomerKey>,
}

/// A customer-provided encryption key, as S3's headers carry it. `Debug` hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct SseCustomerKey {
    /// The 256-bit key, base64.
    pub key: String,
    /// MD5 of the key, base64.
    pub key_md5: String,
}

impl std::fmt::Debug for SseCustomerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SseCustomerKey(<redacted>)")
    }
}

/// How a client shares the origin: the process's budget of requests
/// ([`crate::store::budget`]), and how long a throttled request keeps trying.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Throttling {
    pub limits: crate::store::budget::Limits,
    /// A request the origin throttles is tried again, backing off, until this
    /// long after it was first sent; [`RetryPolicy::max_attempts`] counts only
    /// the other failures.
    pub deadline: Duration,
}

/// Everything that shapes a client.
#[derive(Clone, Debug)]
pub struct S3ClientOptions {
    pub endpoint: url::Url,
    pub region: String,
    pub addressing: Addressing,
    pub credentials: CredentialMode,
    pub timeouts: Timeouts,
    pub retry: RetryPolicy,
    /// Sign `Range` too. Off for requests to cache nodes, which widen ranges.
    pub sign_range: bool,
    /// Idle pooled connections kept per host.
    pub pool_idle_per_host: usize,
    /// Proxy and trusted roots.
    pub network: Network,
    /// Headers every request carries (requester pays, bucket owner, SSE-C).
    pub request: RequestOptions,
    /// AWS's own endpoint: a bucket in another region is followed there.
    pub aws: Option<AwsEndpoint>,
    /// The origin's budget and throttle deadline; `None` for a client of cache
    /// nodes, which answer throttling of their own by failing over.
    pub throttling: Option<Throttling>,
}
