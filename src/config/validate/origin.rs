//! `[origin]`: the bucket's endpoint, region, credentials, deadlines and retries.

use crate::config::defaults;
use crate::config::raw::RawOrigin;
use std::path::PathBuf;
use std::time::Duration;

use crate::aws::endpoint::{is_region_name, AwsEndpoint};
use crate::aws::region::{self, RegionSource};
use crate::config::{
    Addressing, Network, OriginConfig, Proxy, RequestOptions, RetryPolicy, SseCustomerKey,
    Throttling, Timeouts,
};
use crate::store::budget::Limits;

use super::{Validator, R};

impl Validator<'_> {
    pub(super) fn origin(&self, o: RawOrigin) -> R<OriginConfig> {
        let throttling = self.throttling(&o)?;
        let raw_creds = o.credentials.unwrap_or_default();
        let (region, region_source) = match o.region {
            Some(r) => (r, RegionSource::Config),
            None => region::from_env(self.env, raw_creds.profile.as_deref())
                .unwrap_or_else(|| ("us-east-1".into(), RegionSource::Default)),
        };
        if !is_region_name(&region) {
            return Err(self.err(
                "origin.region",
                format!("{region:?} (from {region_source}) is not a region name"),
            ));
        }
        let fips = o.fips.unwrap_or(false);
        let dual_stack = o.dual_stack.unwrap_or(false);
        let (endpoint_s, aws) = match o.endpoint {
            Some(e) => {
                if fips || dual_stack {
                    let key = if fips {
                        "origin.fips"
                    } else {
                        "origin.dual_stack"
                    };
                    return Err(self.err(
                        key,
                        "applies to AWS's own endpoints, and origin.endpoint names another: remove one",
                    ));
                }
                (e, None)
            }
            None => {
                let mut a = AwsEndpoint {
                    fips,
                    dual_stack,
                    overridden: false,
                };
                // The SDKs' endpoint override for S3 (a VPC endpoint, a test).
                match self
                    .env
                    .var("AWS_ENDPOINT_URL_S3")
                    .or_else(|| self.env.var("AWS_ENDPOINT_URL"))
                {
                    Some(e) => {
                        a.overridden = true;
                        (e.trim_end_matches('/').to_owned() + "/", Some(a))
                    }
                    None => (a.url(&region).to_string(), Some(a)),
                }
            }
        };
        let endpoint = url::Url::parse(&endpoint_s).map_err(|e| {
            self.err(
                "origin.endpoint",
                format!("{endpoint_s:?} is not a URL: {e}"),
            )
        })?;
        if !matches!(endpoint.scheme(), "http" | "https") || endpoint.host().is_none() {
            return Err(self.err(
                "origin.endpoint",
                format!("{endpoint_s:?} must be an http:// or https:// URL with a host"),
            ));
        }
        if endpoint.query().is_some() || endpoint.path() != "/" {
            return Err(self.err(
                "origin.endpoint",
                format!("{endpoint_s:?} must not have a path or query"),
            ));
        }
        let addressing = match o.addressing.as_deref() {
            // AWS's own endpoints address buckets by host name; others (and
            // overrides, often an IP address) by path.
            None if aws.is_some_and(|a| !a.overridden) => Addressing::Virtual,
            None | Some("path") => Addressing::Path,
            Some("virtual") => Addressing::Virtual,
            Some(other) => {
                return Err(self.err(
                    "origin.addressing",
                    format!("{other:?} is not \"path\" or \"virtual\""),
                ))
            }
        };
        let credentials = self
            .credentials("origin.credentials", &raw_creds, true)?
            .expect("the chain stands in for keys the config does not give");
        let network = Network {
            proxy: self.proxy("origin.proxy", o.proxy, Proxy::FromEnv)?,
            ca_bundle: self.ca_bundle("origin.ca_bundle", o.ca_bundle)?,
        };
        let request = RequestOptions {
            requester_pays: o.requester_pays.unwrap_or(false),
            expected_bucket_owner: match o.expected_bucket_owner {
                Some(a) if a.len() == 12 && a.bytes().all(|b| b.is_ascii_digit()) => Some(a),
                Some(a) => {
                    return Err(self.err(
                        "origin.expected_bucket_owner",
                        format!("{a:?} is not a 12-digit AWS account id"),
                    ))
                }
                None => None,
            },
            sse_customer_key: o
                .sse_customer_key_env
                .map(|var| self.sse_customer_key(&var))
                .transpose()?,
        };
        let max_attempts = o.max_attempts.unwrap_or(defaults::ORIGIN_MAX_ATTEMPTS);
        if max_attempts == 0 || max_attempts > 20 {
            return Err(self.err(
                "origin.max_attempts",
                format!("{max_attempts} is out of range 1..=20"),
            ));
        }
        let timeouts = Timeouts {
            connect: self.positive(
                "origin.connect_timeout",
                o.connect_timeout
                    .map_or(defaults::ORIGIN_CONNECT_TIMEOUT, |d| d.0),
            )?,
            first_byte: self.positive(
                "origin.first_byte_timeout",
                o.first_byte_timeout
                    .map_or(defaults::ORIGIN_FIRST_BYTE_TIMEOUT, |d| d.0),
            )?,
            stall: self.positive(
                "origin.stall_timeout",
                o.stall_timeout
                    .map_or(defaults::ORIGIN_STALL_TIMEOUT, |d| d.0),
            )?,
        };
        let retry = RetryPolicy {
            max_attempts,
            base: o.retry_base.map_or(defaults::RETRY_BASE, |d| d.0),
            max: o.retry_max.map_or(defaults::RETRY_MAX, |d| d.0),
        };
        if retry.base > retry.max {
            return Err(self.err("origin.retry_base", "is larger than origin.retry_max"));
        }
        Ok(OriginConfig {
            endpoint,
            region,
            region_source,
            aws,
            addressing,
            credentials,
            timeouts,
            retry,
            network,
            request,
            throttling,
        })
    }

    /// The origin budget (`max_requests_per_second`, `max_bytes_per_second`,
    /// `max_concurrent_requests`, each off unless set) and `throttle_deadline`.
    fn throttling(&self, o: &RawOrigin) -> R<Throttling> {
        let requests_per_second = match o.max_requests_per_second {
            Some(r) if !(r.is_finite() && (1.0..=1e6).contains(&r)) => {
                return Err(self.err(
                    "origin.max_requests_per_second",
                    format!("{r} is out of range 1..=1000000"),
                ))
            }
            r => r,
        };
        let bytes_per_second = match o.max_bytes_per_second {
            Some(b) if b.0 < 64 << 10 => {
                return Err(self.err(
                    "origin.max_bytes_per_second",
                    format!("{} bytes is below the least, 64KiB", b.0),
                ))
            }
            b => b.map(|b| b.0),
        };
        let concurrency = match o.max_concurrent_requests {
            Some(c) if c == 0 || c > 65_536 => {
                return Err(self.err(
                    "origin.max_concurrent_requests",
                    format!("{c} is out of range 1..=65536"),
                ))
            }
            c => c,
        };
        let deadline = o
            .throttle_deadline
            .map_or(defaults::THROTTLE_DEADLINE, |d| d.0);
        if deadline.is_zero() || deadline > Duration::from_secs(3600) {
            return Err(self.err(
                "origin.throttle_deadline",
                format!("{deadline:?} is out of range: above 0, at most an hour"),
            ));
        }
        Ok(Throttling {
            limits: Limits {
                requests_per_second,
                bytes_per_second,
                concurrency,
            },
            deadline,
        })
    }

    /// A proxy key: a URL, or (absent) `default`.
    pub(super) fn proxy(&self, key: &str, raw: Option<String>, default: Proxy) -> R<Proxy> {
        let Some(p) = raw else { return Ok(default) };
        let ok = url::Url::parse(&p)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
        match ok {
            Some(_) => Ok(Proxy::Url(p)),
            None => Err(self.err(
                key,
                format!("{p:?} is not an http:// or https:// proxy URL"),
            )),
        }
    }

    /// A `ca_bundle` key, else `AWS_CA_BUNDLE`: a readable file of PEM certificates.
    pub(super) fn ca_bundle(&self, key: &str, raw: Option<String>) -> R<Option<PathBuf>> {
        let (path, from) = match raw {
            Some(p) => (p, key.to_owned()),
            None => match self.env.var("AWS_CA_BUNDLE") {
                Some(p) => (p, "AWS_CA_BUNDLE".to_owned()),
                None => return Ok(None),
            },
        };
        let text = self
            .env
            .read_file(&path)
            .ok_or_else(|| self.err(key, format!("cannot read {path} (from {from})")))?;
        match reqwest::Certificate::from_pem_bundle(text.as_bytes()) {
            Ok(certs) if !certs.is_empty() => Ok(Some(PathBuf::from(path))),
            _ => Err(self.err(
                key,
                format!("{path} (from {from}) holds no PEM certificates"),
            )),
        }
    }

    /// An SSE-C key from environment variable `var`: 32 bytes, base64.
    fn sse_customer_key(&self, var: &str) -> R<SseCustomerKey> {
        use base64::Engine;
        use md5::Digest;
        let key = "origin.sse_customer_key_env";
        let text = self
            .env
            .var(var)
            .ok_or_else(|| self.err(key, format!("environment variable {var} is not set")))?;
        let b64 = base64::engine::general_purpose::STANDARD;
        let raw = b64.decode(text.trim()).map_err(|_| {
            self.err(
                key,
                format!("{var} is not base64 (it must hold a 256-bit key, base64)"),
            )
        })?;
        if raw.len() != 32 {
            return Err(self.err(
                key,
                format!(
                    "{var} holds {} bytes; an SSE-C key is 32 (AES-256)",
                    raw.len()
                ),
            ));
        }
        Ok(SseCustomerKey {
            key: b64.encode(&raw),
            key_md5: b64.encode(md5::Md5::digest(&raw)),
        })
    }
}
