//! The AWS SDK's credential and region providers (STS, SSO, instance metadata,
//! container credentials) over shoal's own HTTP client: the origin's proxy and
//! trusted roots ([`crate::net`]), and its deadlines. Without this the SDK would
//! bring its own client, which knows neither (IRSA behind an egress proxy could
//! not reach STS) and a second TLS stack.
//!
//! The providers send small requests with bodies held in memory and read small
//! answers, so a request is sent whole and its answer read whole.

use std::time::Duration;

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;

use crate::net::Network;

/// Hosts the SDK reaches on the instance itself: never through a proxy.
const ON_HOST: &str = "169.254.169.254,169.254.170.2,169.254.170.23,fd00:ec2::254,fd00:ec2::23";

/// An HTTP client for the SDK's providers, going out as `network` says.
pub fn provider_client(network: &Network, connect: Duration) -> Result<SharedHttpClient, String> {
    // The proxy is set here rather than read by reqwest, so that the on-host
    // endpoints stay out of it.
    let direct = Network {
        proxy: crate::net::Proxy::Off,
        ca_bundle: network.ca_bundle.clone(),
    };
    let mut b = crate::net::client_builder(&direct, connect)?;
    if let Some(p) = proxy_for(network)? {
        b = b.proxy(p);
    }
    let client = b
        .build()
        .map_err(|e| format!("cannot build the credential providers' HTTP client: {e}"))?;
    Ok(SharedHttpClient::new(Providers { client }))
}

/// The proxy the providers use, with the on-host endpoints left out of it.
fn proxy_for(network: &Network) -> Result<Option<reqwest::Proxy>, String> {
    let url = match &network.proxy {
        crate::net::Proxy::Url(u) => Some(u.clone()),
        crate::net::Proxy::FromEnv => ["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty())),
        crate::net::Proxy::Off => None,
    };
    let Some(url) = url else {
        return Ok(None);
    };
    let no_proxy = std::env::var("NO_PROXY")
        .or_else(|_| std::env::var("no_proxy"))
        .unwrap_or_default();
    let list = if no_proxy.is_empty() {
        ON_HOST.to_owned()
    } else {
        format!("{no_proxy},{ON_HOST}")
    };
    let p = reqwest::Proxy::all(&url).map_err(|e| format!("bad proxy {url}: {e}"))?;
    Ok(Some(p.no_proxy(reqwest::NoProxy::from_string(&list))))
}

#[derive(Debug, Clone)]
struct Providers {
    client: reqwest::Client,
}

impl HttpClient for Providers {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        _: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(Connector {
            client: self.client.clone(),
            connect: settings.connect_timeout(),
            read: settings.read_timeout(),
        })
    }
}

#[derive(Debug)]
struct Connector {
    client: reqwest::Client,
    connect: Option<Duration>,
    read: Option<Duration>,
}

impl HttpConnector for Connector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let client = self.client.clone();
        // The SDK's own deadlines for this provider (IMDS sets a short one), as a
        // bound on the whole exchange.
        let deadline = match (self.connect, self.read) {
            (Some(c), Some(r)) => Some(c + r),
            (c, r) => c.or(r),
        };
        HttpConnectorFuture::new(async move {
            let req = request
                .try_into_http1x()
                .map_err(|e| ConnectorError::other(e.into(), None))?;
            let (parts, body) = req.into_parts();
            let body = body.bytes().map(bytes::Bytes::copy_from_slice);
            let mut rb = client
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers);
            if let Some(b) = body {
                rb = rb.body(b);
            }
            if let Some(d) = deadline {
                rb = rb.timeout(d);
            }
            let resp = rb.send().await.map_err(connector_error)?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let bytes = resp.bytes().await.map_err(connector_error)?;
            let mut out = http::Response::new(SdkBody::from(bytes));
            *out.status_mut() = status;
            *out.headers_mut() = headers;
            HttpResponse::try_from(out).map_err(|e| ConnectorError::other(e.into(), None))
        })
    }
}

fn connector_error(e: reqwest::Error) -> ConnectorError {
    if e.is_timeout() {
        ConnectorError::timeout(e.into())
    } else {
        ConnectorError::io(e.into())
    }
}
