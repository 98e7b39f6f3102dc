//! The S3 client against a real S3 server (the local origin, or one given by
//! `SHOAL_TEST_S3_*`; see tests/common).

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::{data, TestS3};
use bytes::Bytes;
use shoal::config::{CredentialMode, Credentials};
use shoal::store::s3::S3Client;
use shoal::store::{ByteRange, Deadline, GetObject, ListRequest, StoreError};
use shoal_testorigin::FaultSettings;

#[tokio::test]
async fn ranged_gets_return_exactly_the_bytes_asked_for() {
    let t = TestS3::start().await;
    let body = data(100_003, 1);
    let etag = t.put("obj", body.clone()).await;
    let key = t.key("obj");
    let n = body.len() as u64;
    let cases: Vec<(Option<ByteRange>, std::ops::Range<usize>)> = vec![
        (None, 0..body.len()),
        (Some(ByteRange::span(0, 1)), 0..1),
        (Some(ByteRange::span(50_000, 50_001)), 50_000..50_001),
        (Some(ByteRange::span(n - 1, n)), body.len() - 1..body.len()),
        (Some(ByteRange::span(1234, 77_777)), 1234..77_777),
        (
            Some(ByteRange::From {
                first: 99_000,
                last: None,
            }),
            99_000..body.len(),
        ),
        (Some(ByteRange::Suffix(10)), body.len() - 10..body.len()),
        // A last byte past the end is clamped, as S3 does.
        (
            Some(ByteRange::From {
                first: 100_000,
                last: Some(200_000),
            }),
            100_000..body.len(),
        ),
    ];
    for (range, want) in cases {
        let mut req = GetObject::new(&t.bucket, &key);
        req.range = range;
        let (meta, got) = t.client.get_bytes(&req).await.unwrap();
        assert_eq!(got, body.slice(want.clone()), "range {range:?}");
        assert_eq!(meta.size, n);
        assert_eq!(meta.etag, etag);
    }
    let meta = t
        .client
        .head_object(&GetObject::new(&t.bucket, &key))
        .await
        .unwrap();
    assert_eq!((meta.size, meta.etag.as_str()), (n, etag.as_str()));
    assert!(meta.last_modified.is_some());

    let r = t
        .client
        .get_bytes(&GetObject::new(&t.bucket, &key).range(ByteRange::From {
            first: n,
            last: None,
        }))
        .await;
    assert!(matches!(r, Err(StoreError::InvalidRange { .. })), "{r:?}");
}

#[tokio::test]
async fn a_prefix_is_not_an_object() {
    let t = TestS3::start().await;
    t.put("dir/inner", data(3, 12)).await;
    // Only dir/inner exists: dir/ and dir are missing keys, not server errors.
    for k in ["dir/", "dir"] {
        let r = t
            .client
            .get_bytes(&GetObject::new(&t.bucket, t.key(k)))
            .await;
        assert!(matches!(r, Err(StoreError::NoSuchKey { .. })), "{k}: {r:?}");
    }
}

#[tokio::test]
async fn empty_object() {
    let t = TestS3::start().await;
    t.put("empty", Bytes::new()).await;
    let (meta, got) = t
        .client
        .get_bytes(&GetObject::new(&t.bucket, t.key("empty")))
        .await
        .unwrap();
    assert_eq!((meta.size, got.len()), (0, 0));
}

#[tokio::test]
async fn if_match_pins_a_version() {
    let t = TestS3::start().await;
    let old = t.put("v", data(1000, 2)).await;
    let new = t.put("v", data(1000, 3)).await;
    assert_ne!(old, new);
    let key = t.key("v");
    let r = t
        .client
        .get_bytes(&GetObject::new(&t.bucket, &key).if_match(&old))
        .await;
    assert!(
        matches!(r, Err(StoreError::PreconditionFailed { .. })),
        "{r:?}"
    );
    let r = t
        .client
        .head_object(&GetObject::new(&t.bucket, &key).if_match(&old))
        .await;
    assert!(
        matches!(r, Err(StoreError::PreconditionFailed { .. })),
        "{r:?}"
    );
    let (_, got) = t
        .client
        .get_bytes(&GetObject::new(&t.bucket, &key).if_match(&new))
        .await
        .unwrap();
    assert_eq!(got, data(1000, 3));
    let mut req = GetObject::new(&t.bucket, &key);
    req.if_none_match = Some(new.clone());
    let r = t.client.get_object(&req).await;
    assert!(
        matches!(r, Err(StoreError::NotModified { .. })),
        "{:?}",
        r.err()
    );
}

#[tokio::test]
async fn missing_key_and_bucket() {
    let t = TestS3::start().await;
    let r = t
        .client
        .get_bytes(&GetObject::new(&t.bucket, t.key("nope")))
        .await;
    assert!(matches!(r, Err(StoreError::NoSuchKey { .. })), "{r:?}");
    let r = t
        .client
        .head_object(&GetObject::new(&t.bucket, t.key("nope")))
        .await;
    assert!(matches!(r, Err(StoreError::NoSuchKey { .. })), "{r:?}");
    let r = t
        .client
        .get_bytes(&GetObject::new("shoal-no-such-bucket-x1", "k"))
        .await;
    assert!(matches!(r, Err(StoreError::NoSuchBucket { .. })), "{r:?}");
    let r = t.client.head_bucket("shoal-no-such-bucket-x1").await;
    assert!(matches!(r, Err(StoreError::NoSuchBucket { .. })), "{r:?}");
    t.client.head_bucket(&t.bucket).await.unwrap();
}

#[tokio::test]
async fn listing_2500_keys_pages_with_and_without_delimiter() {
    let t = TestS3::start().await;
    let items: Vec<(String, Bytes)> = (0..2500)
        .map(|i| {
            (
                format!("many/d{}/k{i:05}", i % 5),
                Bytes::from(vec![b'x'; i % 7]),
            )
        })
        .collect();
    t.put_many(items.clone()).await;
    let want: BTreeSet<String> = items.iter().map(|(k, _)| t.key(k)).collect();

    // Without a delimiter: 3 pages of at most 1000.
    let mut req = ListRequest {
        bucket: t.bucket.clone(),
        prefix: t.key("many/"),
        ..Default::default()
    };
    let mut got = Vec::new();
    let mut pages = 0;
    loop {
        let page = t.client.list_objects_v2(&req).await.unwrap();
        pages += 1;
        assert!(page.objects.len() <= 1000);
        got.extend(page.objects);
        match page.next_continuation_token {
            Some(tok) => req.continuation_token = Some(tok),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(got.len(), 2500, "every key exactly once");
    assert_eq!(
        got.iter().map(|e| e.key.clone()).collect::<BTreeSet<_>>(),
        want
    );
    let e = got
        .iter()
        .find(|e| e.key == t.key("many/d3/k00003"))
        .unwrap();
    assert_eq!(e.size, 3);
    assert_eq!(e.etag.len(), 32, "listing carries the ETag");
    assert!(e.last_modified.is_some());

    // With a delimiter: five directories, paged two at a time.
    let mut req = ListRequest {
        bucket: t.bucket.clone(),
        prefix: t.key("many/"),
        delimiter: Some("/".into()),
        max_keys: Some(2),
        ..Default::default()
    };
    let mut dirs = Vec::new();
    loop {
        let page = t.client.list_objects_v2(&req).await.unwrap();
        assert!(page.objects.is_empty());
        dirs.extend(page.common_prefixes);
        match page.next_continuation_token {
            Some(tok) => req.continuation_token = Some(tok),
            None => break,
        }
    }
    let want_dirs: Vec<String> = (0..5).map(|d| t.key(&format!("many/d{d}/"))).collect();
    assert_eq!(dirs, want_dirs);

    // One directory through list_all: 500 keys.
    let d0 = t
        .client
        .list_all(&t.bucket, &t.key("many/d0/"), Some("/"))
        .await
        .unwrap();
    assert_eq!(d0.objects.len(), 500);
    assert!(d0.common_prefixes.is_empty());
}

#[tokio::test]
async fn odd_keys_round_trip() {
    let t = TestS3::start().await;
    let keys = [
        "with space.txt",
        "plus+sign",
        "percent%20literal",
        "unicode/ünïcødé/日本語.bin",
        "double//slash",
        "trailing~tilde&amp=eq?q",
        "/leading-slash",
    ];
    for (i, k) in keys.iter().enumerate() {
        let body = data(100 + i, i as u64);
        t.put(k, body.clone()).await;
        let (_, got) = t
            .client
            .get_bytes(&GetObject::new(&t.bucket, t.key(k)))
            .await
            .unwrap();
        assert_eq!(got, body, "key {k:?}");
    }
    let listed: BTreeSet<String> = t
        .client
        .list_all(&t.bucket, &t.prefix, None)
        .await
        .unwrap()
        .objects
        .into_iter()
        .map(|e| e.key)
        .collect();
    let want: BTreeSet<String> = keys.iter().map(|k| t.key(k)).collect();
    assert_eq!(listed, want);
    // Keys a URL cannot carry are refused before anything is sent.
    let r = t
        .client
        .get_bytes(&GetObject::new(&t.bucket, "a/../b"))
        .await;
    assert!(matches!(r, Err(StoreError::InvalidKey { .. })), "{r:?}");
}

#[tokio::test]
async fn bad_credentials_are_access_denied() {
    let t = TestS3::start().await;
    t.put("secret", data(10, 4)).await;
    let mut opts = t.opts.clone();
    opts.credentials = CredentialMode::Keys(Credentials {
        access_key_id: match &t.opts.credentials {
            CredentialMode::Keys(c) => c.access_key_id.clone(),
            other => unreachable!("the test client has keys, not {other:?}"),
        },
        secret_access_key: "wrong-secret".into(),
        session_token: None,
    });
    let bad = S3Client::new(opts.clone()).unwrap();
    let err = bad
        .get_bytes(&GetObject::new(&t.bucket, t.key("secret")))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::AccessDenied { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.starts_with("AccessDenied: ") && msg.len() > "AccessDenied: ".len() + 5,
        "{msg}"
    );
    // Not retried: a wrong key does not get better.
    opts.credentials = CredentialMode::Anonymous;
    let anon = S3Client::new(opts).unwrap();
    let err = anon
        .get_bytes(&GetObject::new(&t.bucket, t.key("secret")))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::AccessDenied { .. }), "{err:?}");
}

#[tokio::test]
async fn presigned_url_reads_the_object() {
    let t = TestS3::start().await;
    t.put("pre", data(500, 5)).await;
    let url = t
        .client
        .presign_get(&t.bucket, &t.key("pre"), Duration::from_secs(60))
        .await
        .unwrap();
    let body = reqwest::get(&url).await.unwrap();
    assert_eq!(body.status(), 200, "{url}");
    assert_eq!(body.bytes().await.unwrap(), data(500, 5));
}

#[tokio::test]
async fn throttling_is_retried_then_reported_with_its_cause() {
    let t = TestS3::start().await;
    let Some(origin) = t.local("throttling") else {
        return;
    };
    t.put("thr", data(5000, 6)).await;
    let key = t.key("thr");
    origin.stats.reset();
    // Two 503s, then success: retried within the policy's 4 attempts.
    origin.faults.fail_next(2);
    let (_, got) = t
        .client
        .get_bytes(&GetObject::new(&t.bucket, &key))
        .await
        .unwrap();
    assert_eq!(got, data(5000, 6));
    assert_eq!(origin.stats.snapshot().gets_of(&t.bucket, &key), 3);

    // Always 503: four attempts, then an error naming the cause.
    origin.stats.reset();
    origin.faults.set(FaultSettings {
        slowdown_per_mille: 1000,
        ..Default::default()
    });
    let err = t
        .client
        .get_bytes(&GetObject::new(&t.bucket, &key))
        .await
        .unwrap_err();
    origin.faults.clear();
    assert!(
        matches!(err.cause(), StoreError::Throttled { .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("gave up after 4 attempts") && msg.contains("SlowDown"),
        "{msg}"
    );
    assert_eq!(origin.stats.snapshot().gets_of(&t.bucket, &key), 4);
}

#[tokio::test]
async fn bodies_cut_midway_are_fetched_again() {
    let t = TestS3::start().await;
    let Some(origin) = t.local("cut bodies") else {
        return;
    };
    let body = data(2 << 20, 7);
    t.put("cut", body.clone()).await;
    let key = t.key("cut");
    origin.stats.reset();
    origin.faults.reset_next(2);
    let (_, got) = t
        .client
        .get_bytes(&GetObject::new(&t.bucket, &key))
        .await
        .unwrap();
    assert_eq!(got, body);
    assert_eq!(origin.stats.snapshot().gets_of(&t.bucket, &key), 3);

    // Every body cut: the error says so.
    origin.faults.set(FaultSettings {
        reset_per_mille: 1000,
        ..Default::default()
    });
    let err = t
        .client
        .get_bytes(&GetObject::new(&t.bucket, &key))
        .await
        .unwrap_err();
    origin.faults.clear();
    assert!(err.to_string().contains("body cut off"), "{err}");
}

#[tokio::test]
async fn slow_first_byte_times_out() {
    let t = TestS3::start().await;
    let Some(origin) = t.local("first-byte timeout") else {
        return;
    };
    t.put("slow", data(10, 8)).await;
    let mut opts = t.opts.clone();
    opts.timeouts.first_byte = Duration::from_millis(100);
    opts.retry.max_attempts = 2;
    let c = S3Client::new(opts).unwrap();
    origin.faults.set(FaultSettings {
        first_byte_delay_ms: 1000,
        ..Default::default()
    });
    let err = c
        .get_bytes(&GetObject::new(&t.bucket, t.key("slow")))
        .await
        .unwrap_err();
    origin.faults.clear();
    assert!(
        matches!(
            err.cause(),
            StoreError::Timeout {
                deadline: Deadline::FirstByte,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_server_that_closes_connections_is_retried_then_reported() {
    // A listener that accepts and immediately closes every connection.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let a2 = accepts.clone();
    tokio::spawn(async move {
        loop {
            let (sock, _) = listener.accept().await.unwrap();
            a2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(sock);
        }
    });
    let opts =
        crate::common::client_options(&format!("http://{addr}"), "us-east-1", "k", "s", true);
    let c = S3Client::new(opts).unwrap();
    let err = c.get_bytes(&GetObject::new("b", "k")).await.unwrap_err();
    assert!(
        matches!(err.cause(), StoreError::Transport { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("gave up after 4 attempts"),
        "{err}"
    );
    assert!(accepts.load(std::sync::atomic::Ordering::SeqCst) >= 4);

    // Nothing listening at all: a connect error.
    drop(c);
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = closed.local_addr().unwrap();
    drop(closed);
    let c = S3Client::new(crate::common::client_options(
        &format!("http://{dead}"),
        "us-east-1",
        "k",
        "s",
        true,
    ))
    .unwrap();
    let err = c.head_object(&GetObject::new("b", "k")).await.unwrap_err();
    assert!(matches!(err.cause(), StoreError::Connect { .. }), "{err:?}");
    assert!(err.to_string().contains(&dead.to_string()), "{err}");
}
