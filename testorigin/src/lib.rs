//! A real S3 server on loopback for shoal's tests, demo and benchmarks.
//!
//! Built on `s3s` (request parsing, SigV4 verification, S3 XML) over an in-memory
//! store, with a fault mode ([`Faults`]) and exact request counters ([`Stats`]).
//! Start it in process with [`Origin::start`], or as the `shoal-test-origin` binary.
//! [`aws_mock`] serves the AWS services that hand out its temporary keys.

mod auth;
pub mod aws_mock;
mod errors;
mod faults;
mod lists;
mod objects;
mod policy;
mod s3impl;
mod server;
mod store;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

pub use auth::Keys;
pub use faults::{
    FaultSettings, Faults, RequestCount, RequestKind, Stats, StatsSnapshot, Tick, TICK,
};
pub use lists::s3_url_encode;
pub use policy::{BucketPolicy, Policy};
pub use store::{ObjectAttrs, Store, StoredObject};

/// How to start an origin.
#[derive(Clone, Debug)]
pub struct OriginOptions {
    pub listen: SocketAddr,
    pub access_key: String,
    pub secret_key: String,
    pub region: String,
    /// Buckets created at start.
    pub buckets: Vec<String>,
    /// Serve HTTPS with this certificate chain and key (PEM).
    pub tls: Option<(String, String)>,
}

impl Default for OriginOptions {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            access_key: "shoal-test-key".into(),
            secret_key: "shoal-test-secret-0123456789".into(),
            region: "us-east-1".into(),
            buckets: vec!["shoal-test".into()],
            tls: None,
        }
    }
}

/// A TLS acceptor for a PEM certificate chain and key (the test origin's, and
/// any test server's that wants the same).
pub fn tls_acceptor(cert: &str, key: &str) -> Result<tokio_rustls::TlsAcceptor, String> {
    let certs = rustls_pemfile::certs(&mut cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let key = rustls_pemfile::private_key(&mut key.as_bytes())
        .map_err(|e| e.to_string())?
        .ok_or("no private key")?;
    let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(Arc::new(
        tokio_rustls::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| e.to_string())?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// A running origin. Dropping it stops the server.
pub struct Origin {
    pub addr: SocketAddr,
    /// The keys it accepts; more can be added while it runs.
    pub keys: auth::Keys,
    pub options: OriginOptions,
    pub store: Arc<Store>,
    pub faults: Arc<Faults>,
    pub stats: Arc<Stats>,
    /// Bucket regions, requester pays, owners, and temporary keys' sessions.
    pub policy: Policy,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Origin {
    /// Binds `options.listen` and serves on the current tokio runtime.
    pub async fn start(options: OriginOptions) -> std::io::Result<Origin> {
        let listener = TcpListener::bind(options.listen).await?;
        Ok(Self::start_on(listener, options))
    }

    /// Serves on an already-bound listener.
    pub fn start_on(listener: TcpListener, options: OriginOptions) -> Origin {
        let addr = listener
            .local_addr()
            .expect("bound listener has an address");
        let store = Arc::new(Store::default());
        for b in &options.buckets {
            store.create_bucket(b);
        }
        let mut builder = s3s::service::S3ServiceBuilder::new(s3impl::MemS3 {
            store: store.clone(),
        });
        let keys = auth::Keys::default();
        keys.add(&options.access_key, &options.secret_key);
        builder.set_auth(keys.clone());
        let faults = Arc::new(Faults::default());
        let stats = Arc::new(Stats::default());
        let policy = Policy::default();
        let shared = Arc::new(server::Shared {
            s3: builder.build(),
            faults: faults.clone(),
            stats: stats.clone(),
            policy: policy.clone(),
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let tls = options
            .tls
            .as_ref()
            .map(|(cert, key)| tls_acceptor(cert, key).expect("a usable certificate and key"));
        let task = tokio::spawn(server::serve(listener, shared, tls, async {
            let _ = stopped.await;
        }));
        Origin {
            addr,
            keys,
            options,
            store,
            faults,
            stats,
            policy,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// `http://127.0.0.1:PORT` (`https://` with TLS)
    pub fn endpoint(&self) -> String {
        let scheme = if self.options.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// Adds a temporary key: requests signed with it must carry `token`, and fail
    /// with `ExpiredToken` from `expires` on.
    pub fn add_temporary_key(
        &self,
        access_key: &str,
        secret_key: &str,
        token: &str,
        expires: Option<std::time::SystemTime>,
    ) {
        self.keys.add(access_key, secret_key);
        self.policy.add_session(access_key, token, expires);
    }

    /// Stores an object directly (no HTTP, not counted), returning its ETag.
    pub fn put(&self, bucket: &str, key: &str, data: impl Into<Bytes>) -> String {
        self.put_with(bucket, key, data, ObjectAttrs::default())
    }

    /// [`Self::put`] with the headers a PUT would store.
    pub fn put_with(
        &self,
        bucket: &str,
        key: &str,
        data: impl Into<Bytes>,
        attrs: ObjectAttrs,
    ) -> String {
        self.store
            .put_with(bucket, key, data.into(), attrs)
            .unwrap_or_else(|| panic!("origin has no bucket {bucket}"))
    }

    pub fn delete(&self, bucket: &str, key: &str) {
        let _ = self.store.delete(bucket, key);
    }

    /// An object's bytes as stored now (not counted), if it exists.
    pub fn get(&self, bucket: &str, key: &str) -> Option<Bytes> {
        self.store.get(bucket, key).ok().map(|o| o.data)
    }

    /// Stops accepting and drops every open connection.
    pub async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}
