//! The region chain, in the SDK's order: the config's `region`, `AWS_REGION`,
//! `AWS_DEFAULT_REGION`, the profile's `region` in the shared config file, and,
//! for AWS's own endpoints only, the instance metadata service. The first four
//! are read when the config is (through [`Env`], so tests can substitute them);
//! metadata needs the network and is asked by the programs at start
//! ([`from_instance_metadata`]).

use std::time::Duration;

use super::env::{ini_value, Env};
use crate::net::Network;

/// Where a region came from, for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegionSource {
    Config,
    Variable(&'static str),
    Profile(String),
    InstanceMetadata,
    /// Nothing said: `us-east-1`, as the SDKs assume.
    Default,
}

impl std::fmt::Display for RegionSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegionSource::Config => write!(f, "origin.region"),
            RegionSource::Variable(v) => write!(f, "{v}"),
            RegionSource::Profile(p) => write!(f, "the region of profile {p:?}"),
            RegionSource::InstanceMetadata => write!(f, "the instance metadata"),
            RegionSource::Default => write!(f, "the default (nothing set one)"),
        }
    }
}

/// The region from the environment or the shared config file, if either says.
pub fn from_env(env: &dyn Env, profile: Option<&str>) -> Option<(String, RegionSource)> {
    for var in ["AWS_REGION", "AWS_DEFAULT_REGION"] {
        if let Some(r) = env.var(var) {
            return Some((r, RegionSource::Variable(var)));
        }
    }
    let name = profile
        .map(str::to_owned)
        .or_else(|| env.var("AWS_PROFILE"))
        .unwrap_or_else(|| "default".into());
    let path = env
        .var("AWS_CONFIG_FILE")
        .or_else(|| env.var("HOME").map(|h| format!("{h}/.aws/config")))?;
    let text = env.read_file(&path)?;
    // The config file names profiles `[profile NAME]`, except `[default]`.
    let section = if name == "default" {
        "default".to_owned()
    } else {
        format!("profile {name}")
    };
    let r = ini_value(&text, &section, "region")?;
    Some((r, RegionSource::Profile(name)))
}

/// The instance's region from IMDSv2 (`AWS_EC2_METADATA_SERVICE_ENDPOINT` moves
/// it), or `None` if there is no metadata service within `deadline`.
pub async fn from_instance_metadata(network: &Network, deadline: Duration) -> Option<String> {
    if std::env::var("AWS_EC2_METADATA_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true")) {
        return None;
    }
    let http = match super::http::provider_client(network, deadline) {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!("cannot ask the instance metadata for the region: {e}");
            return None;
        }
    };
    let conf = aws_config::provider_config::ProviderConfig::default().with_http_client(http);
    let client = aws_config::imds::Client::builder()
        .configure(&conf)
        .connect_timeout(deadline)
        .read_timeout(deadline)
        .max_attempts(1)
        .build();
    let p = aws_config::imds::region::ImdsRegionProvider::builder()
        .imds_client(client)
        .build();
    tokio::time::timeout(deadline * 3, p.region())
        .await
        .ok()
        .flatten()
        .map(|r| r.as_ref().to_owned())
}
