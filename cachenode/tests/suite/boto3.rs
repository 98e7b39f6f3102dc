//! An ordinary S3 client (boto3) pointed at a node: list, head and download
//! byte-exact with the node's keys; a wrong secret and no signature get 403.

use crate::common::*;

const SCRIPT: &str = r#"
import hashlib, os, sys, tempfile
import boto3
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

endpoint, bucket, key, secret, want_md5 = sys.argv[1:6]
cfg = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1})
def client(secret, signed=True):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
        aws_access_key_id="node-client", aws_secret_access_key=secret,
        config=cfg if signed else Config(s3={"addressing_style": "path"}, signature_version=UNSIGNED))

s3 = client(secret)
listed = s3.list_objects_v2(Bucket=bucket, Prefix="data/")
keys = [o["Key"] for o in listed.get("Contents", [])]
assert keys == [key], keys
head = s3.head_object(Bucket=bucket, Key=key)
size = head["ContentLength"]
body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
assert hashlib.md5(body).hexdigest() == want_md5, "get_object bytes differ"
part = s3.get_object(Bucket=bucket, Key=key, Range="bytes=1000-1999")["Body"].read()
assert part == body[1000:2000]
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "x")
    s3.download_file(bucket, key, path)
    assert hashlib.md5(open(path, "rb").read()).hexdigest() == want_md5, "download_file bytes differ"
for bad in (client("wrong-secret"), client(secret, signed=False)):
    try:
        bad.get_object(Bucket=bucket, Key=key)
        raise SystemExit("unauthorised read succeeded")
    except ClientError as e:
        assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 403, e.response
print("boto3 ok", size)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boto3_reads_through_a_node() {
    let origin = origin().await;
    let node = node_for(&origin, "", "").await;
    let body = data(9 * 1024 * 1024 + 123, 21);
    let etag = origin.put(BUCKET, "data/file.bin", body);
    let endpoint = format!("http://{}", node.addr);
    let stdout = python(
        SCRIPT,
        &[&endpoint, BUCKET, "data/file.bin", NODE_SECRET, &etag],
    )
    .await;
    assert!(stdout.contains("boto3 ok 9437307"), "{stdout}");
}

const LIST_SCRIPT: &str = r#"
import sys
import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

endpoint, bucket, secret = sys.argv[1:4]
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
    aws_access_key_id="node-client", aws_secret_access_key=secret,
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
want = sorted(["l/a", "l/b", "l/d1/x", "l/d1/y", "l/d2/z", "l/e", "l/f%+ \u00fc", "m/outside"])
want_l = [k for k in want if k.startswith("l/")]

def v1(**kw):
    keys, prefixes = [], []
    for page in s3.get_paginator("list_objects").paginate(Bucket=bucket, **kw):
        keys += [o["Key"] for o in page.get("Contents", [])]
        prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
    return keys, prefixes

one = s3.list_objects(Bucket=bucket, Prefix="l/")
assert [o["Key"] for o in one["Contents"]] == want_l, one["Contents"]
assert one["IsTruncated"] is False
assert v1(Prefix="l/", PaginationConfig={"PageSize": 2}) == (want_l, [])
assert v1(PaginationConfig={"PageSize": 3}) == (want, [])
# With a delimiter, a page may end on a common prefix: the next one skips it.
for size in (1, 2, 3):
    got = v1(Prefix="l/", Delimiter="/", PaginationConfig={"PageSize": size})
    assert got == (["l/a", "l/b", "l/e", "l/f%+ \u00fc"], ["l/d1/", "l/d2/"]), (size, got)
assert v1(Delimiter="/") == ([], ["l/", "m/"])
# A marker given by hand is "start after".
after = s3.list_objects(Bucket=bucket, Prefix="l/", Marker="l/d1/x")
assert [o["Key"] for o in after["Contents"]] == want_l[3:], after["Contents"]
assert bucket in [b["Name"] for b in s3.list_buckets()["Buckets"]]
try:
    s3.list_objects(Bucket="no-such-bucket")
    raise SystemExit("listed a missing bucket")
except ClientError as e:
    assert e.response["Error"]["Code"] == "NoSuchBucket", e.response
print("list ok")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boto3_lists_with_version_1_and_markers() {
    let origin = origin().await;
    let node = node_for(&origin, "", "").await;
    for k in [
        "l/a",
        "l/b",
        "l/d1/x",
        "l/d1/y",
        "l/d2/z",
        "l/e",
        "l/f%+ \u{fc}",
        "m/outside",
    ] {
        origin.put(BUCKET, k, bytes::Bytes::from_static(b"x"));
    }
    let endpoint = format!("http://{}", node.addr);
    let stdout = python(LIST_SCRIPT, &[&endpoint, BUCKET, NODE_SECRET]).await;
    assert!(stdout.contains("list ok"), "{stdout}");
}

/// Runs a Python script with `args`; its standard output, once it succeeded.
async fn python(script: &str, args: &[&str]) -> String {
    let out = tokio::process::Command::new("python3")
        .args(["-c", script])
        .args(args)
        .output()
        .await
        .expect("python3 runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "boto3 script failed:\n{stdout}\n{stderr}"
    );
    stdout.into_owned()
}
