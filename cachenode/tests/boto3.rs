//! An ordinary S3 client (boto3) pointed at a node: list, head and download
//! byte-exact with the node's keys; a wrong secret and no signature get 403.

mod common;

use common::*;

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
    let node = start_node(&parse(&node_toml(&origin, "", ""))).await;
    let body = data(9 * 1024 * 1024 + 123, 21);
    let etag = origin.put(BUCKET, "data/file.bin", body);
    let out = tokio::process::Command::new("python3")
        .args(["-c", SCRIPT])
        .arg(format!("http://{}", node.addr))
        .args([BUCKET, "data/file.bin", NODE_SECRET, &etag])
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
    assert!(stdout.contains("boto3 ok 9437307"), "{stdout}");
}
