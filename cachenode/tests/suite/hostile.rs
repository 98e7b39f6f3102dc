//! Malformed and hostile requests get S3 errors or a closed connection: never a
//! crash, never a byte of the wrong object.

use std::time::Duration;

use crate::common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn open_node() -> (shoal_testorigin::Origin, TestNode) {
    let origin = origin().await;
    let toml = without_auth(&node_toml(&origin, "domains = [\"s3.shoal.test\"]", ""));
    let node = start_node(&parse(&toml)).await;
    (origin, node)
}

/// Sends raw bytes, returns what came back before the server closed or went quiet.
async fn raw(addr: std::net::SocketAddr, req: &[u8]) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(req).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match tokio::time::timeout(Duration::from_millis(1500), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn alive(addr: std::net::SocketAddr) {
    let r = reqwest::get(format!("http://{addr}/healthz"))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn bad_ranges_get_s3_errors_or_exact_bytes() {
    let (origin, node) = open_node().await;
    let body = data(100, 1);
    origin.put(BUCKET, "obj", body.clone());
    let http = reqwest::Client::new();
    let url = format!("http://{}/{BUCKET}/obj", node.addr);
    for range in [
        "bytes=abc",
        "bytes=5-2",
        "bytes=0-1,3-4",
        "items=0-1",
        "bytes=-",
        "bytes=99999999999999999999999-",
        "bytes= 1-2",
    ] {
        let r = http.get(&url).header("range", range).send().await.unwrap();
        let status = r.status().as_u16();
        let cr = r
            .headers()
            .get("content-range")
            .map(|v| v.to_str().unwrap().to_owned());
        let got = r.bytes().await.unwrap();
        match status {
            200 => assert_eq!(got, body, "{range}: a 200 must be the whole object"),
            206 => {
                let cr = cr.expect("206 has Content-Range");
                let (a, b) = cr
                    .trim_start_matches("bytes ")
                    .split_once('/')
                    .unwrap()
                    .0
                    .split_once('-')
                    .unwrap();
                let (a, b): (usize, usize) = (a.parse().unwrap(), b.parse().unwrap());
                assert_eq!(
                    got,
                    body.slice(a..=b),
                    "{range}: 206 bytes must match Content-Range"
                );
            }
            400..=499 => assert!(
                String::from_utf8_lossy(&got).contains("<Error>"),
                "{range}: {status} without S3 XML"
            ),
            _ => panic!("{range}: unexpected status {status}"),
        }
    }
    let r = http
        .get(&url)
        .header("range", "bytes=100-200")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 416);
    assert!(r.text().await.unwrap().contains("InvalidRange"));
    // Any range of an empty object selects nothing (the fuzz seed that found a
    // Content-Range of "bytes 0--1/0").
    origin.put(BUCKET, "empty", Vec::new());
    for range in ["bytes=-1", "bytes=0-", "bytes=0-0"] {
        let r = http
            .get(format!("http://{}/{BUCKET}/empty", node.addr))
            .header("range", range)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 416, "{range} of an empty object");
    }
    alive(node.addr).await;
}

#[tokio::test]
async fn dot_segments_and_encoded_keys() {
    let (origin, node) = open_node().await;
    origin.put(BUCKET, "b", data(10, 2));
    origin.put(BUCKET, "A b+c", data(10, 3));
    // A dot-segment key is refused, never resolved to another object.
    let out = raw(
        node.addr,
        format!("GET /{BUCKET}/a/../b HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await;
    assert!(
        out.starts_with("HTTP/1.1 400") || out.starts_with("HTTP/1.1 404"),
        "{out}"
    );
    assert!(!out.contains(&String::from_utf8_lossy(&data(10, 2))[..]));
    let out = raw(
        node.addr,
        format!(
            "GET /{BUCKET}/a/%2E%2E/b HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    assert!(
        out.starts_with("HTTP/1.1 400") || out.starts_with("HTTP/1.1 404"),
        "{out}"
    );
    // Percent-encoding is decoded exactly once.
    let r = reqwest::get(format!("http://{}/{BUCKET}/%41%20b%2Bc", node.addr))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap(), data(10, 3));
    let r = reqwest::get(format!("http://{}/{BUCKET}/%2541", node.addr))
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    alive(node.addr).await;
}

#[tokio::test]
async fn huge_headers_and_pipelined_garbage() {
    let (origin, node) = open_node().await;
    origin.put(BUCKET, "k", data(10, 4));
    let big = "x".repeat(64 * 1024);
    let out = raw(
        node.addr,
        format!("GET /{BUCKET}/k HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: {big}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await;
    assert!(
        out.is_empty() || out.starts_with("HTTP/1.1 "),
        "{}",
        &out[..out.len().min(200)]
    );
    // One good request, then garbage on the same connection.
    let mut req = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".to_vec();
    req.extend_from_slice(b"\x00\x01GARBAGE /\xff\xfe HTTP/9.9\r\n\r\n");
    let out = raw(node.addr, &req).await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    // Requests with no bucket or a bogus method.
    let out = raw(
        node.addr,
        b"BREW / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(
        out.starts_with("HTTP/1.1 4") || out.starts_with("HTTP/1.1 5") && out.contains("<Error>"),
        "{out}"
    );
    alive(node.addr).await;
}

#[tokio::test]
async fn virtual_hosted_requests() {
    let (origin, node) = open_node().await;
    origin.put(BUCKET, "vh/key", data(64, 7));
    let out = raw(
        node.addr,
        format!(
            "GET /vh/key HTTP/1.1\r\nHost: {BUCKET}.s3.shoal.test\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.contains("content-length: 64\r\n"), "{out}");
}

/// Found by fuzzing: s3s's date parser subtracts before it checks for a digit
/// (see the note in Cargo.toml). Such requests must be refused, never take the
/// connection down.
#[tokio::test]
async fn malformed_signature_dates_are_refused() {
    let origin = origin().await;
    let node = node_for(&origin, "", "").await;
    let http = reqwest::Client::new();
    for (auth, date) in [
        (
            "AWS4-HMAC-SHA256 Credential=node-client/40..2119/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00",
            "20261129T000000Z",
        ),
        (
            "AWS4-HMAC-SHA256 Credential=node-client/20261129/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00",
            "2026-1-29T00:00:00Z",
        ),
    ] {
        let r = http
            .get(format!("http://{}/{BUCKET}/k", node.addr))
            .header("authorization", auth)
            .header("x-amz-date", date)
            .header("x-amz-content-sha256", "UNSIGNED-PAYLOAD")
            .send()
            .await
            .unwrap();
        assert!(r.status().is_client_error(), "{auth} / {date}: {}", r.status());
    }
    alive(node.addr).await;
}
