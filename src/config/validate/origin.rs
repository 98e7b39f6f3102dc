//! `[origin]`: the bucket's endpoint, region, credentials, deadlines and retries.

use crate::config::defaults;
use crate::config::raw::RawOrigin;
use crate::config::{Addressing, OriginConfig, RetryPolicy, Timeouts};

use super::{Validator, R};

impl Validator<'_> {
    pub(super) fn origin(&self, o: RawOrigin) -> R<OriginConfig> {
        let region = o.region.unwrap_or_else(|| "us-east-1".into());
        if region.is_empty()
            || !region
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return Err(self.err("origin.region", format!("{region:?} is not a region name")));
        }
        let endpoint_s = o
            .endpoint
            .unwrap_or_else(|| format!("https://s3.{region}.amazonaws.com"));
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
            .credentials("origin.credentials", &o.credentials.unwrap_or_default(), true)?
            .ok_or_else(|| {
                self.err(
                    "origin.credentials",
                    "no credentials found: give [origin.credentials] keys, set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, \
                     add a profile to ~/.aws/credentials, or write anonymous = true",
                )
            })?;
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
            addressing,
            credentials,
            timeouts,
            retry,
        })
    }
}
