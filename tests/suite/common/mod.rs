//! The library's test harness: an S3 origin to test against, on the shared test kit.
//!
//! By default a real S3 server (the `shoal-testorigin` crate) runs in process on
//! 127.0.0.1. With `SHOAL_TEST_S3_ENDPOINT`, `SHOAL_TEST_S3_BUCKET`,
//! `SHOAL_TEST_S3_ACCESS_KEY`, `SHOAL_TEST_S3_SECRET_KEY` (and optionally
//! `SHOAL_TEST_S3_REGION`) set, the same tests run against that endpoint instead
//! (MinIO, Garage, AWS), each under a fresh random prefix; tests that need the
//! fault mode or exact request counts are skipped there, and say so.
#![allow(dead_code)]

use bytes::Bytes;
use futures_util::{stream, StreamExt};
use shoal::store::s3::{S3Client, S3ClientOptions};

pub use shoal_testkit::*;

pub struct TestS3 {
    /// The in-process origin; `None` against an external endpoint.
    pub origin: Option<Origin>,
    pub opts: S3ClientOptions,
    pub client: S3Client,
    pub bucket: String,
    /// Every key a test writes is under this prefix.
    pub prefix: String,
}

fn random_prefix() -> String {
    format!("t{:016x}/", rand::random::<u64>())
}

impl TestS3 {
    pub async fn start() -> TestS3 {
        if let Ok(endpoint) = std::env::var("SHOAL_TEST_S3_ENDPOINT") {
            let var = |n: &str| {
                std::env::var(n)
                    .unwrap_or_else(|_| panic!("{n} must be set with SHOAL_TEST_S3_ENDPOINT"))
            };
            let region =
                std::env::var("SHOAL_TEST_S3_REGION").unwrap_or_else(|_| "us-east-1".into());
            let opts = client_options(
                &endpoint,
                &region,
                &var("SHOAL_TEST_S3_ACCESS_KEY"),
                &var("SHOAL_TEST_S3_SECRET_KEY"),
                true,
            );
            return TestS3 {
                origin: None,
                client: S3Client::new(opts.clone()).unwrap(),
                opts,
                bucket: var("SHOAL_TEST_S3_BUCKET"),
                prefix: random_prefix(),
            };
        }
        let origin = origin().await;
        let client = origin_client(&origin);
        TestS3 {
            opts: client.options().clone(),
            client,
            bucket: BUCKET.into(),
            prefix: random_prefix(),
            origin: Some(origin),
        }
    }

    pub fn key(&self, k: &str) -> String {
        format!("{}{k}", self.prefix)
    }

    /// Uploads `data` at `prefix + k` through the S3 API; returns the ETag.
    pub async fn put(&self, k: &str, data: impl Into<Bytes>) -> String {
        self.client
            .put_object(&self.bucket, &self.key(k), data.into())
            .await
            .expect("put")
    }

    /// Uploads many objects, 32 at a time.
    pub async fn put_many(&self, items: Vec<(String, Bytes)>) {
        stream::iter(items)
            .map(|(k, d)| async move { self.put(&k, d).await })
            .buffer_unordered(32)
            .collect::<Vec<_>>()
            .await;
    }

    /// The in-process origin, or `None` (and a note) when the test needs the fault
    /// mode and runs against an external endpoint.
    pub fn local(&self, test: &str) -> Option<&Origin> {
        if self.origin.is_none() {
            eprintln!("skipped {test}: needs the local origin's fault mode and counters");
        }
        self.origin.as_ref()
    }
}
