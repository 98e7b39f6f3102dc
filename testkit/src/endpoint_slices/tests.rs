use super::*;

use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

const PATH: &str = "/apis/discovery.k8s.io/v1/namespaces/shoal/endpointslices";
const ESCAPED: &str = "labelSelector=kubernetes.io%2Fservice-name%3Dcache";
const PLAIN: &str = "labelSelector=kubernetes.io/service-name=cache";

fn endpoint(address: &str, ready: bool, zone: Option<&str>) -> SliceEndpoint {
    SliceEndpoint::pod(address, ready, zone)
}

/// A watch response read a line at a time.
struct Watch {
    resp: reqwest::Response,
    buf: Vec<u8>,
}

impl Watch {
    async fn open(api: &EndpointSlicesApi, extra: &str) -> Watch {
        let resp = reqwest::Client::new()
            .get(format!("{}{PATH}?{ESCAPED}&watch=1&{extra}", api.url()))
            .bearer_auth(&api.token)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(
            resp.headers()
                .get("transfer-encoding")
                .map(|v| v.to_str().unwrap()),
            Some("chunked")
        );
        Watch {
            resp,
            buf: Vec::new(),
        }
    }

    /// The next event, `None` once the response has ended.
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Some(serde_json::from_slice(&line).unwrap());
            }
            let chunk = tokio::time::timeout(Duration::from_secs(5), self.resp.chunk())
                .await
                .expect("no word from the watch in 5 s")
                .unwrap();
            match chunk {
                Some(c) => self.buf.extend_from_slice(&c),
                None => {
                    assert!(self.buf.is_empty(), "a partial line at the end");
                    return None;
                }
            }
        }
    }

    async fn event(&mut self) -> Value {
        self.next().await.expect("the watch ended")
    }
}

async fn list(api: &EndpointSlicesApi, selector: &str) -> Value {
    let resp = reqwest::Client::new()
        .get(format!("{}{PATH}?{selector}", api.url()))
        .bearer_auth(&api.token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap()
}

#[tokio::test]
async fn endpoint_slices_list_watch_bookmark_expire() {
    let api = EndpointSlicesApi::start().await;
    let client = reqwest::Client::new();

    // No token, a wrong one: 401. Another path: 404.
    let resp = client
        .get(format!("{}{PATH}?{ESCAPED}", api.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let body: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    assert_eq!(body["reason"], "Unauthorized");
    assert_eq!(body["code"], 401);
    let resp = client
        .get(format!("{}{PATH}?{ESCAPED}&watch=1", api.url()))
        .bearer_auth("not-the-token")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let resp = client
        .get(format!("{}/api/v1/namespaces/shoal/endpoints", api.url()))
        .bearer_auth(&api.token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    assert_eq!(api.lists(), 0);
    assert_eq!(api.watches(), 0);

    // Empty, then one slice (the selector unescaped too).
    let l = list(&api, ESCAPED).await;
    assert_eq!(l["kind"], "EndpointSliceList");
    assert_eq!(l["apiVersion"], "discovery.k8s.io/v1");
    assert_eq!(l["metadata"]["resourceVersion"], "0");
    assert_eq!(l["items"], json!([]));
    api.set_slice(
        "shoal",
        "cache",
        "cache-abc",
        "s3",
        9000,
        &[endpoint("127.0.0.5", true, Some("zone-a"))],
    );
    api.set_slice("shoal", "other", "other-x", "s3", 9000, &[]);
    api.set_slice("elsewhere", "cache", "cache-zzz", "s3", 9000, &[]);
    let l = list(&api, PLAIN).await;
    assert_eq!(l["metadata"]["resourceVersion"], "3");
    assert_eq!(
        l["items"],
        json!([{
            "kind": "EndpointSlice",
            "apiVersion": "discovery.k8s.io/v1",
            "metadata": {
                "name": "cache-abc",
                "generateName": "cache-",
                "namespace": "shoal",
                "resourceVersion": "1",
                "generation": 1,
                "creationTimestamp": "2025-01-01T00:00:00Z",
                "labels": {
                    "kubernetes.io/service-name": "cache",
                    "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                },
                "ownerReferences": [{
                    "apiVersion": "v1",
                    "kind": "Service",
                    "name": "cache",
                    "controller": true,
                    "blockOwnerDeletion": true,
                }],
            },
            "addressType": "IPv4",
            "endpoints": [{
                "addresses": ["127.0.0.5"],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "targetRef": {"kind": "Pod", "namespace": "shoal", "name": "pod-127-0-0-5"},
                "zone": "zone-a",
            }],
            "ports": [{"name": "s3", "port": 9000, "protocol": "TCP"}],
        }])
    );
    assert_eq!(api.lists(), 2);

    // A watch from the listed version: the changes after it, in order,
    // only this namespace's and service's.
    let mut w = Watch::open(&api, "resourceVersion=3").await;
    assert_eq!(api.watches(), 1);
    api.set_slice("shoal", "other", "other-x", "s3", 9000, &[]);
    api.set_slice(
        "shoal",
        "cache",
        "cache-def",
        "s3",
        9000,
        &[endpoint("127.0.0.6", false, None)],
    );
    api.set_slice(
        "shoal",
        "cache",
        "cache-abc",
        "s3",
        9001,
        &[endpoint("127.0.0.5", false, Some("zone-b"))],
    );
    api.delete_slice("shoal", "cache-abc");
    let e = w.event().await;
    assert_eq!(e["type"], "ADDED");
    assert_eq!(e["object"]["metadata"]["name"], "cache-def");
    assert_eq!(e["object"]["metadata"]["resourceVersion"], "5");
    let ep = &e["object"]["endpoints"][0];
    assert_eq!(ep["conditions"]["ready"], false);
    assert!(ep.get("zone").is_none(), "{ep}");
    let e = w.event().await;
    assert_eq!(e["type"], "MODIFIED");
    assert_eq!(e["object"]["metadata"]["name"], "cache-abc");
    assert_eq!(e["object"]["metadata"]["resourceVersion"], "6");
    assert_eq!(e["object"]["ports"][0]["port"], 9001);
    assert_eq!(e["object"]["endpoints"][0]["zone"], "zone-b");
    let e = w.event().await;
    assert_eq!(e["type"], "DELETED");
    assert_eq!(e["object"]["metadata"]["name"], "cache-abc");
    assert_eq!(e["object"]["metadata"]["resourceVersion"], "7");
    assert_eq!(e["object"]["ports"][0]["port"], 9001);

    // A second watch from the same version gets them replayed, then
    // bookmarks with the current version, and ends after its timeout.
    let mut again = Watch::open(
        &api,
        "resourceVersion=3&allowWatchBookmarks=true&timeoutSeconds=2",
    )
    .await;
    let kinds = [
        again.event().await["type"].clone(),
        again.event().await["type"].clone(),
        again.event().await["type"].clone(),
    ];
    assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED"]);
    let b = again.event().await;
    assert_eq!(b["type"], "BOOKMARK");
    assert_eq!(b["object"]["kind"], "EndpointSlice");
    assert_eq!(b["object"]["apiVersion"], "discovery.k8s.io/v1");
    assert_eq!(b["object"]["metadata"]["resourceVersion"], "7");
    let started = Instant::now();
    while let Some(e) = again.next().await {
        assert_eq!(e["type"], "BOOKMARK");
    }
    assert!(started.elapsed() < Duration::from_secs(5));

    // expire(): the open watch ends; one from any version handed out before
    // it (the last one, 7, too) gets 410 and ends, as does one from a version
    // that is no number; one from now goes on.
    api.expire();
    assert!(w.next().await.is_none(), "the open watch went on");
    let expired = json!({
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "reason": "Expired",
            "code": 410,
            "message": "too old resource version",
        },
    });
    for from in [
        "resourceVersion=3",
        "resourceVersion=7",
        "resourceVersion=x",
    ] {
        let mut old = Watch::open(&api, &format!("{from}&allowWatchBookmarks=true")).await;
        assert_eq!(old.event().await, expired);
        assert!(old.next().await.is_none());
    }
    // The expiry moved the version past every one handed out (7): 8 is now.
    let mut now = Watch::open(&api, "resourceVersion=8").await;
    api.set_slice("shoal", "cache", "cache-def", "s3", 9000, &[]);
    let e = now.event().await;
    assert_eq!(e["type"], "MODIFIED");
    assert_eq!(e["object"]["metadata"]["resourceVersion"], "9");
    assert_eq!(api.watches(), 6);
    assert_eq!(api.lists(), 2);

    // A watcher whose client went away is dropped (at a change after its
    // task has seen the response go).
    drop(now);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        api.set_slice("shoal", "cache", "cache-def", "s3", 9000, &[]);
        if api.store.lock().unwrap().watchers.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the gone client's watcher stayed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What the Go encoding leaves out or writes `null`, as the API server sends
/// it: a Service with no pod, a port with no name, an endpoint with no zone and
/// no condition set, a bookmark.
#[tokio::test]
async fn objects_as_the_go_encoding_writes_them() {
    let api = EndpointSlicesApi::start().await;
    api.placeholder("shoal", "cache", "cache-abc");
    let bare = SliceEndpoint {
        conditions: Conditions::default(),
        ..endpoint("fd00::7", true, None)
    };
    let unnamed = SlicePort {
        name: None,
        port: Some(9000),
    };
    api.set_slice_ports("shoal", "cache", "cache-v6", &[unnamed], &[bare]);
    let l = list(&api, PLAIN).await;
    let placeholder = &l["items"][0];
    assert_eq!(placeholder["metadata"]["name"], "cache-abc");
    assert_eq!(placeholder["endpoints"], Value::Null);
    assert_eq!(placeholder["ports"], Value::Null);
    assert_eq!(placeholder["addressType"], "IPv4");
    let v6 = &l["items"][1];
    assert_eq!(v6["addressType"], "IPv6");
    assert_eq!(v6["ports"], json!([{"port": 9000, "protocol": "TCP"}]));
    let e = &v6["endpoints"][0];
    assert_eq!(e["conditions"], json!({}));
    for absent in ["zone", "nodeName", "hostname", "hints"] {
        assert!(e.get(absent).is_none(), "{absent} in {e}");
    }
    let mut w = Watch::open(&api, "resourceVersion=2&allowWatchBookmarks=true").await;
    let b = w.event().await;
    assert_eq!(b["type"], "BOOKMARK");
    assert_eq!(
        b["object"],
        json!({
            "kind": "EndpointSlice",
            "apiVersion": "discovery.k8s.io/v1",
            "metadata": {"resourceVersion": "2", "creationTimestamp": null},
            "addressType": "",
            "endpoints": null,
            "ports": null,
        })
    );
    // A terminating pod as the controller writes it.
    let t = SliceEndpoint::terminating("127.0.0.9", Some("z"));
    api.set_slice("shoal", "cache", "cache-abc", "s3", 9000, &[t]);
    let e = w.event().await;
    assert_eq!(e["type"], "MODIFIED");
    assert_eq!(
        e["object"]["endpoints"][0]["conditions"],
        json!({"ready": false, "serving": true, "terminating": true})
    );
}
