use std::time::Duration;

use shoal::config::{
    Addressing, CredentialMode, Credentials, Network, Proxy, RetryPolicy, Timeouts,
};
use shoal::store::s3::{S3Client, S3ClientOptions};

/// The one shape of test client: `endpoint` with a key pair, short deadlines, a
/// few quick retries. `sign_range` off for nodes, which widen ranges.
pub fn client_options(
    endpoint: &str,
    region: &str,
    access: &str,
    secret: &str,
    sign_range: bool,
) -> S3ClientOptions {
    S3ClientOptions {
        endpoint: url::Url::parse(endpoint).expect("endpoint URL"),
        region: region.into(),
        addressing: Addressing::Path,
        credentials: CredentialMode::Keys(Credentials {
            access_key_id: access.into(),
            secret_access_key: secret.into(),
            session_token: None,
        }),
        timeouts: Timeouts {
            connect: Duration::from_secs(2),
            first_byte: Duration::from_secs(20),
            stall: Duration::from_secs(20),
        },
        retry: RetryPolicy {
            max_attempts: if sign_range { 4 } else { 1 },
            base: Duration::from_millis(5),
            max: Duration::from_millis(50),
        },
        sign_range,
        pool_idle_per_host: 16,
        network: Network {
            proxy: Proxy::Off,
            ca_bundle: None,
        },
        request: Default::default(),
        aws: None,
        throttling: None,
    }
}

/// A client of the node at `addr` (`host:port`) signing with `access`/`secret`.
pub fn node_s3_client(addr: &str, access: &str, secret: &str) -> S3Client {
    S3Client::new(client_options(
        &format!("http://{addr}"),
        "us-east-1",
        access,
        secret,
        false,
    ))
    .expect("client")
}
