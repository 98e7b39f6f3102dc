//! How shoal's HTTP clients leave the host: the proxy and the roots they trust.
//!
//! Every client that talks to AWS or to the origin (the S3 client, and the AWS
//! SDK's credential providers through [`crate::aws::http`]) is built here, so a
//! proxy or a private CA set for the origin holds for all of them.

use std::path::PathBuf;
use std::time::Duration;

/// How a client's connections leave the host.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Network {
    pub proxy: Proxy,
    /// PEM certificates trusted beside the system's roots.
    pub ca_bundle: Option<PathBuf>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Proxy {
    /// `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY` (the origin's default).
    #[default]
    FromEnv,
    /// Never (node-to-node traffic by default).
    Off,
    /// Every request through this proxy URL, except hosts `NO_PROXY` names.
    Url(String),
}

/// A client builder that goes out as `network` says, connecting within `connect`.
/// Errors name what could not be used (a proxy URL, a CA bundle).
pub fn client_builder(
    network: &Network,
    connect: Duration,
) -> Result<reqwest::ClientBuilder, String> {
    let mut b = reqwest::Client::builder()
        .connect_timeout(connect)
        .tcp_nodelay(true);
    b = match &network.proxy {
        // reqwest reads HTTPS_PROXY, HTTP_PROXY, ALL_PROXY and NO_PROXY itself.
        Proxy::FromEnv => b,
        Proxy::Off => b.no_proxy(),
        Proxy::Url(u) => b.proxy(
            reqwest::Proxy::all(u)
                .map_err(|e| format!("bad proxy {u}: {e}"))?
                .no_proxy(reqwest::NoProxy::from_env()),
        ),
    };
    if let Some(path) = &network.ca_bundle {
        let pem = std::fs::read(path)
            .map_err(|e| format!("cannot read CA bundle {}: {e}", path.display()))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| format!("CA bundle {} is not PEM: {e}", path.display()))?;
        for c in certs {
            b = b.add_root_certificate(c);
        }
    }
    Ok(b)
}
