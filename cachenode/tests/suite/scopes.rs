//! Scoped node keys, seen from real S3 clients: keys scoped to bucket `scope-a`
//! or to its prefix `p/`, for each of read, list, write and purge, ask inside and
//! outside their scope by header signature and presigned URL (boto3, the aws CLI)
//! on a gateway and on its owner node. Every refusal is a 403 AccessDenied that
//! leaves the origin's request count and the cache as they were; every allowed
//! request works; every request has its access-log line.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use shoal_testorigin::{Origin, OriginOptions};

use crate::common::*;

pub const A: &str = "scope-a";
pub const B: &str = "scope-b";
pub const CLUSTER_KEY: &str = "cluster-key";

/// The test keys: `(id, allow)`; `None` is a key with no allow list.
pub fn keys() -> Vec<(String, Option<String>)> {
    let mut v = Vec::new();
    for action in ["read", "list", "write", "purge"] {
        v.push((format!("{action}-bucket"), Some(format!("{action}:{A}"))));
        v.push((
            format!("{action}-prefix"),
            Some(format!("{action}:{A}/p/*")),
        ));
    }
    v.push(("plain".into(), None));
    v
}

pub fn secret(id: &str) -> String {
    format!("secret-of-{id}")
}

/// `[auth]` with every test key and the cluster's, then `extra` in `[[auth.keys]]`
/// of the keys named in `extra_for`.
pub fn auth_section(extra: &str) -> String {
    let mut s = format!(
        "[auth]\n[[auth.keys]]\naccess_key_id = \"{CLUSTER_KEY}\"\nsecret_access_key = \"{}\"\n",
        secret(CLUSTER_KEY)
    );
    for (id, allow) in keys() {
        s.push_str(&format!(
            "[[auth.keys]]\naccess_key_id = \"{id}\"\nsecret_access_key = \"{}\"\n",
            secret(&id)
        ));
        if let Some(a) = allow {
            s.push_str(&format!("allow = [\"{a}\"]\n"));
        }
        s.push_str(extra);
    }
    s
}

pub async fn scope_origin() -> Origin {
    Origin::start(OriginOptions {
        buckets: vec![A.into(), B.into()],
        ..Default::default()
    })
    .await
    .unwrap()
}

/// A node's config for `o` with the test keys, `node_extra` in `[node]`, then `rest`.
pub fn scoped_toml(o: &Origin, node_extra: &str, rest: &str) -> String {
    format!(
        "{}[node]\nlisten = \"127.0.0.1:0\"\n{node_extra}\n{}{rest}\n",
        origin_toml(o),
        auth_section("")
    )
}

pub fn cluster_of(addr: &str) -> String {
    format!(
        "[cluster]\nnodes = [\"{addr}\"]\nconnect_timeout = \"300ms\"\nfirst_byte_timeout = \"1s\"\n\
         stall_timeout = \"1s\"\n[cluster.credentials]\naccess_key_id = \"{CLUSTER_KEY}\"\n\
         secret_access_key = \"{}\"\n",
        secret(CLUSTER_KEY)
    )
}

/// Runs requests one at a time as the test says: prints `READY i`, waits for a
/// line on stdin, runs case i, prints `DONE i STATUS CODE`.
const MATRIX: &str = r#"
import json, sys, urllib.request, urllib.error
import boto3, botocore
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

endpoint = sys.argv[1]
cases = json.load(open(sys.argv[2]))
cfg = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, signature_version="s3v4")
clients = {}
def s3(key):
    if key not in clients:
        clients[key] = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
            aws_access_key_id=key, aws_secret_access_key="secret-of-" + key, config=cfg)
    return clients[key]

def raw(method, url, key, body=b""):
    req = AWSRequest(method=method, url=url, data=body)
    S3SigV4Auth(Credentials(key, "secret-of-" + key), "s3", "us-east-1").add_auth(req)
    return http(urllib.request.Request(url, data=body if method != "GET" else None,
        headers=dict(req.headers), method=method))

def http(r):
    try:
        with urllib.request.urlopen(r) as resp:
            resp.read()
            return resp.status, ""
    except urllib.error.HTTPError as e:
        body = e.read().decode(errors="replace")
        code = body.split("<Code>")[1].split("</Code>")[0] if "<Code>" in body else ""
        return e.code, code

def run(c):
    k, op, b, name = c["key"], c["op"], c["bucket"], c["name"]
    c3 = s3(k)
    try:
        if op == "get":
            r = c3.get_object(Bucket=b, Key=name); r["Body"].read()
            return r["ResponseMetadata"]["HTTPStatusCode"], ""
        if op == "head":
            r = c3.head_object(Bucket=b, Key=name)
            return r["ResponseMetadata"]["HTTPStatusCode"], ""
        if op == "list":
            r = c3.list_objects_v2(Bucket=b, Prefix=name)
            return r["ResponseMetadata"]["HTTPStatusCode"], ""
        if op == "put":
            r = c3.put_object(Bucket=b, Key=name, Body=b"written by " + k.encode())
            return r["ResponseMetadata"]["HTTPStatusCode"], ""
        if op == "delete":
            r = c3.delete_object(Bucket=b, Key=name)
            return r["ResponseMetadata"]["HTTPStatusCode"], ""
        if op == "presigned_get":
            url = c3.generate_presigned_url("get_object", Params={"Bucket": b, "Key": name}, ExpiresIn=300)
            return http(urllib.request.Request(url))
        if op == "presigned_put":
            url = c3.generate_presigned_url("put_object", Params={"Bucket": b, "Key": name}, ExpiresIn=300)
            return http(urllib.request.Request(url, data=b"presigned by " + k.encode(), method="PUT"))
        if op in ("purge", "purge_local"):
            local = "&shoal-local" if op == "purge_local" else ""
            q = urllib.parse.quote(name, safe="")
            return raw("POST", f"{endpoint}/{b}?shoal-purge&key={q}{local}", k)
        raise SystemExit("unknown op " + op)
    except ClientError as e:
        return e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"]

import urllib.parse
for i, c in enumerate(cases):
    print("READY", i, flush=True)
    sys.stdin.readline()
    status, code = run(c)
    print("DONE", i, status, code or "-", flush=True)
"#;

/// One request of the matrix, and whether the key's scope covers it.
struct Case {
    key: String,
    op: &'static str,
    bucket: &'static str,
    name: String,
    allowed: bool,
}

/// The action of an op, for the scope.
fn action(op: &str) -> &'static str {
    match op {
        "get" | "head" | "presigned_get" => "read",
        "list" => "list",
        "put" | "delete" | "presigned_put" => "write",
        _ => "purge",
    }
}

fn cases(writes: bool) -> Vec<Case> {
    let mut v = Vec::new();
    for (id, _) in keys() {
        let (key_action, scope) = match id.split_once('-') {
            Some((a, s)) => (a.to_owned(), s.to_owned()),
            None => ("plain".into(), String::new()),
        };
        let covers = |op: &str, bucket: &str, name: &str| -> bool {
            let act = action(op);
            if key_action == "plain" {
                return act == "read" || act == "list";
            }
            act == key_action && bucket == A && (scope == "bucket" || name.starts_with("p/"))
        };
        let mut add = |op: &'static str, bucket: &'static str, name: String| {
            let allowed = covers(op, bucket, &name);
            v.push(Case {
                key: id.clone(),
                op,
                bucket,
                name,
                allowed,
            });
        };
        for (bucket, name) in [(A, "p/in.bin"), (A, "q/out.bin"), (B, "p/x.bin")] {
            add("get", bucket, name.into());
            add("purge", bucket, name.into());
        }
        add("head", A, "p/in.bin".into());
        add("head", A, "q/out.bin".into());
        for (bucket, prefix) in [(A, "p/"), (A, "p/deeper"), (A, ""), (A, "p"), (B, "p/")] {
            add("list", bucket, prefix.into());
        }
        add("presigned_get", A, "p/in.bin".into());
        add("presigned_get", A, "q/out.bin".into());
        if writes {
            for (bucket, dir) in [(A, "p"), (A, "q"), (B, "p")] {
                add("put", bucket, format!("{dir}/new-{id}"));
            }
            add("delete", A, format!("p/new-{id}"));
            add("delete", A, "q/out-never.bin".into());
            add("presigned_put", A, format!("p/pre-{id}"));
            add("presigned_put", A, format!("q/pre-{id}"));
        }
    }
    // The cluster's own key: what forwarding needs and no more.
    let c = |op: &'static str, bucket: &'static str, name: &str, allowed: bool| Case {
        key: CLUSTER_KEY.into(),
        op,
        bucket,
        name: name.into(),
        allowed,
    };
    v.push(c("get", B, "p/x.bin", true));
    v.push(c("list", B, "", true));
    v.push(c("purge_local", A, "p/in.bin", true));
    v.push(c("purge", A, "p/in.bin", false));
    if writes {
        v.push(c("put", A, "p/by-cluster", false));
    }
    v
}

fn origin_requests(o: &Origin) -> u64 {
    o.stats.snapshot().requests.iter().map(|r| r.count).sum()
}

/// What the node holds: block bytes by tier, listing bytes.
async fn cache_content(addr: std::net::SocketAddr) -> (u64, u64) {
    let m = scrape(addr).await;
    (
        metric(&m, "shoal_node_cache_bytes{tier=\"ram\"}") as u64,
        metric(&m, "shoal_node_metadata_bytes") as u64,
    )
}

/// The same twice in a row: nothing is landing in the cache just now.
async fn settled_content(addr: std::net::SocketAddr) -> (u64, u64) {
    let last = std::sync::Mutex::new(cache_content(addr).await);
    wait_for_value("the cache to settle", Duration::from_secs(10), || async {
        let now = cache_content(addr).await;
        let same = now == std::mem::replace(&mut *last.lock().unwrap(), now);
        same.then_some(now)
    })
    .await
}

/// The access log's whole lines: its writer may be half way through the next.
fn log_lines(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let whole = text.rfind('\n').map_or("", |end| &text[..end]);
    whole
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Runs the matrix against `addr`, whose access log is `log`.
async fn run_matrix(o: &Origin, addr: std::net::SocketAddr, log: &std::path::Path, writes: bool) {
    let cases = cases(writes);
    let file = tempfile::NamedTempFile::new().unwrap();
    let spec: Vec<Value> = cases
        .iter()
        .map(|c| json!({"key": c.key, "op": c.op, "bucket": c.bucket, "name": c.name}))
        .collect();
    std::fs::write(file.path(), serde_json::to_vec(&spec).unwrap()).unwrap();
    let mut child = Command::new("python3")
        .args(["-c", MATRIX, &format!("http://{addr}")])
        .arg(file.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut refused, mut allowed) = (0, 0);
    let first_line = log_lines(log).len();
    for (i, c) in cases.iter().enumerate() {
        let logged = first_line + i;
        let what = format!("case {i}: {} {} {}/{}", c.key, c.op, c.bucket, c.name);
        let ready = lines.next().expect("python ended early").unwrap();
        assert_eq!(ready, format!("READY {i}"));
        let before = (origin_requests(o), settled_content(addr).await);
        writeln!(stdin, "go").unwrap();
        let done = lines.next().expect("python ended early").unwrap();
        let parts: Vec<&str> = done.split(' ').collect();
        assert_eq!(parts[..2], ["DONE", &i.to_string()], "{done}");
        let (status, code): (u16, &str) = (parts[2].parse().unwrap(), parts[3]);
        if c.allowed {
            allowed += 1;
            assert!(
                (200..300).contains(&status),
                "{what}: allowed, answered {status} {code}"
            );
        } else {
            refused += 1;
            // A HEAD's answer has no body to name its code: the log names it.
            let want = if c.op == "head" {
                "403"
            } else {
                "AccessDenied"
            };
            assert_eq!((status, code), (403, want), "{what}: not refused");
            let after = (origin_requests(o), cache_content(addr).await);
            assert_eq!(
                before, after,
                "{what}: a refusal changed the origin's count or the cache"
            );
        }
        // Its line: the key, the status, the refusal, the cache outcome.
        let line = wait_for_value(
            &format!("{what}: its access-log line"),
            Duration::from_secs(5),
            || async {
                let all = log_lines(log);
                (all.len() > logged).then(|| all[logged].clone())
            },
        )
        .await;
        assert_eq!(line["access_key"], c.key.as_str(), "{what}: {line}");
        assert_eq!(line["status"], status, "{what}: {line}");
        assert_eq!(line["bucket"], c.bucket, "{what}: {line}");
        if c.allowed {
            assert!(line["error"].is_null(), "{what}: {line}");
        } else {
            assert_eq!(line["error"], "AccessDenied", "{what}: {line}");
            assert_eq!(line["origin_requests"], 0, "{what}: {line}");
        }
        if c.allowed && c.op == "get" {
            let cache = line["cache"].as_str().unwrap_or("");
            assert!(["hit", "miss", "stale"].contains(&cache), "{what}: {line}");
        }
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
    assert!(
        refused > 50 && allowed > 30,
        "{refused} refused, {allowed} allowed"
    );
}

fn put_objects(o: &Origin) {
    o.put(A, "p/in.bin", data(300_000, 1));
    o.put(A, "q/out.bin", data(200_000, 2));
    o.put(B, "p/x.bin", data(100_000, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_keys_on_a_gateway_and_its_owner() {
    let o = scope_origin().await;
    put_objects(&o);
    let dir = tempfile::tempdir().unwrap();
    let owner_log = dir.path().join("owner.log");
    let owner_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let owner_addr = owner_listener.local_addr().unwrap().to_string();
    let owner = start_node_on(
        &parse(&scoped_toml(
            &o,
            &format!("access_log = \"{}\"", owner_log.display()),
            &cluster_of(&owner_addr),
        )),
        owner_listener,
    )
    .await;
    let gw_log = dir.path().join("gateway.log");
    let gateway = start_node(&parse(&scoped_toml(
        &o,
        &format!("access_log = \"{}\"", gw_log.display()),
        &format!("{}[gateway]\nwrites = true\n", cluster_of(&owner_addr)),
    )))
    .await;
    run_matrix(&o, gateway.addr, &gw_log, true).await;
    // The gateway forwarded its misses and invalidations to the owner with the
    // cluster's key, and the owner took every one.
    let forwarded = log_lines(&owner_log);
    assert!(
        forwarded.iter().any(|l| l["method"] == "GET"),
        "{forwarded:?}"
    );
    assert!(
        forwarded.iter().any(|l| l["method"] == "POST"),
        "{forwarded:?}"
    );
    for l in &forwarded {
        assert_eq!(l["access_key"], CLUSTER_KEY, "{l}");
        assert!(l["error"].is_null(), "{l}");
    }
    run_matrix(&o, owner.addr, &owner_log, false).await;
    // Refusals are counted per key.
    let m = scrape(gateway.addr).await;
    assert!(
        metric(
            &m,
            "shoal_node_refusals_total{key=\"read-prefix\",reason=\"scope\"}"
        ) >= 10.0,
        "{m}"
    );
}

/// The aws CLI with a prefix-scoped key: what it may read and list works, the
/// rest is refused without a request to the origin; a presigned URL it makes
/// is held to the same scope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_cli_within_and_outside_its_scope() {
    let o = scope_origin().await;
    put_objects(&o);
    let node = start_node(&parse(&scoped_toml(&o, "", "[gateway]\nwrites = true\n"))).await;
    let ep = format!("--endpoint-url http://{}", node.addr);
    let env = |k: &str| {
        format!(
            "AWS_ACCESS_KEY_ID={k} AWS_SECRET_ACCESS_KEY={} AWS_DEFAULT_REGION=us-east-1 AWS_MAX_ATTEMPTS=1",
            secret(k)
        )
    };
    let cli = |k: &str, args: &str| format!("{} python3 -m awscli {args} {ep}", env(k));
    let mut results = HashMap::new();
    for (name, cmd, ok) in [
        (
            "cp in",
            cli("read-prefix", &format!("s3 cp s3://{A}/p/in.bin -")),
            true,
        ),
        (
            "cp out",
            cli("read-prefix", &format!("s3 cp s3://{A}/q/out.bin -")),
            false,
        ),
        (
            "ls in",
            cli("list-prefix", &format!("s3 ls s3://{A}/p/")),
            true,
        ),
        (
            "ls bucket",
            cli("list-prefix", &format!("s3 ls s3://{A}/")),
            false,
        ),
        (
            "upload in",
            format!(
                "echo hi | {}",
                cli("write-prefix", &format!("s3 cp - s3://{A}/p/cli.txt"))
            ),
            true,
        ),
        (
            "upload by reader",
            format!(
                "echo hi | {}",
                cli("read-bucket", &format!("s3 cp - s3://{A}/p/cli2.txt"))
            ),
            false,
        ),
    ] {
        let before = origin_requests(&o);
        let out = sh(&cmd).await;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.success(), ok, "{name}: {cmd}\n{stderr}");
        if !ok {
            assert!(
                stderr.contains("403") || stderr.contains("AccessDenied"),
                "{name}: {stderr}"
            );
            assert_eq!(origin_requests(&o), before, "{name}: the origin was asked");
        }
        results.insert(name, out);
    }
    assert_eq!(results["cp in"].stdout, data(300_000, 1));
    assert_eq!(o.get(A, "p/cli.txt").unwrap(), "hi\n");
    assert!(o.get(A, "p/cli2.txt").is_none());
    // A presigned URL is held to its signer's scope.
    for (path, want) in [("p/in.bin", "200"), ("q/out.bin", "403")] {
        let url = sh_ok(&cli("read-prefix", &format!("s3 presign s3://{A}/{path}"))).await;
        let code = sh_ok(&format!(
            "curl -s -o /dev/null -w '%{{http_code}}' '{}'",
            url.trim()
        ))
        .await;
        assert_eq!(code.trim(), want, "presigned {path}");
    }
}

/// A config that granted writes and purges to every key before scopes: the node
/// says at start, one line a key, which keys no longer have them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_that_lost_write_and_purge_are_named_at_start() {
    let o = scope_origin().await;
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(
        dir.path(),
        "n",
        &scoped_toml(&o, "", "[gateway]\nwrites = true\n"),
    );
    // Every key of the test section but the eight with an allow list.
    let lines = node.wait_log_lines("has no allow list", 2);
    assert_eq!(lines.len(), 2, "{lines:?}");
    for id in ["plain", CLUSTER_KEY] {
        let l = lines
            .iter()
            .find(|l| l.contains(&format!("auth key {id} ")))
            .unwrap_or_else(|| panic!("{id}: {lines:?}"));
        assert!(l.contains("no longer purge or write"), "{l}");
    }
}
