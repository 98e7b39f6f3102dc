//! S3 clients as users run them, through a node: boto3, the aws CLI, rclone, s3fs
//! and mountpoint-s3 list and read byte for byte, and mountpoint-s3 mounts both a
//! node and the test origin itself. Each tool runs as a real process.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common::*;
use bytes::Bytes;
use md5::Digest;

/// What every client reads. Keys with control characters are for the API clients
/// only: no file system can name them.
fn files() -> BTreeMap<&'static str, Bytes> {
    BTreeMap::from([
        ("data/one.bin", data(3 * (1 << 20) + 7, 1)),
        ("data/two.txt", data(1000, 2)),
        ("data/sub dir/three+x.txt", data(77, 3)),
        ("data/uni/日本語.txt", data(12, 4)),
        ("data/empty", Bytes::new()),
    ])
}

const ODD: &[(&str, &[u8])] = &[("odd/a\u{1}b", b"ctl"), ("odd/c\rd", b"cr")];

async fn setup() -> (Origin, TestNode) {
    let o = origin().await;
    for (k, b) in files() {
        o.put(BUCKET, k, b);
    }
    for (k, b) in ODD {
        o.put(BUCKET, k, Bytes::from_static(b));
    }
    let node = node_for(&o, "", "").await;
    (o, node)
}

/// `cmd` with the node's key in the environment, as a user sets it.
async fn run(cmd: &str) -> String {
    sh_ok(&format!(
        "export AWS_ACCESS_KEY_ID={NODE_KEY} AWS_SECRET_ACCESS_KEY={NODE_SECRET} \
         AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true; {cmd}"
    ))
    .await
}

/// Every file of `files()` under `dir` equals its bytes, and nothing else is there.
fn same_tree(dir: &Path) {
    for (k, b) in files() {
        let got = std::fs::read(dir.join(k.trim_start_matches("data/")))
            .unwrap_or_else(|e| panic!("{k} under {}: {e}", dir.display()));
        assert!(got == b, "{k} differs under {}", dir.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boto3_lists_odd_keys_and_reads_through_a_node() {
    let (_o, node) = setup().await;
    let script = r#"
import hashlib, sys, boto3
from botocore.config import Config
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
keys = []
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=sys.argv[2], PaginationConfig={"PageSize": 2}):
    keys += [o["Key"] for o in page.get("Contents", [])]
for k in sorted(keys):
    body = s3.get_object(Bucket=sys.argv[2], Key=k)["Body"].read()
    print(repr(k), hashlib.md5(body).hexdigest())
"#;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.py");
    std::fs::write(&path, script).unwrap();
    let out = run(&format!(
        "python3 {} http://{} {BUCKET}",
        q(&path),
        node.addr
    ))
    .await;
    let mut want: Vec<String> = files()
        .iter()
        .map(|(k, b)| (k.to_string(), b.clone()))
        .chain(
            ODD.iter()
                .map(|(k, b)| (k.to_string(), Bytes::from_static(b))),
        )
        .map(|(k, b)| format!("{} {:x}", python_repr(&k), md5::Md5::digest(&b)))
        .collect();
    want.sort();
    let mut got: Vec<String> = out.lines().map(str::to_owned).collect();
    got.sort();
    assert_eq!(got, want, "boto3 through the node");
}

/// How Python's `repr` writes these keys.
fn python_repr(k: &str) -> String {
    let mut s = String::from("'");
    for c in k.chars() {
        match c {
            '\r' => s.push_str("\\r"),
            '\u{1}' => s.push_str("\\x01"),
            '\'' => s.push_str("\\'"),
            c => s.push(c),
        }
    }
    s.push('\'');
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_cli_lists_and_copies_through_a_node() {
    let (_o, node) = setup().await;
    let ep = format!("--endpoint-url http://{}", node.addr);
    let listing = run(&format!(
        "python3 -m awscli s3 ls --recursive s3://{BUCKET}/data/ {ep}"
    ))
    .await;
    for k in files().keys() {
        assert!(
            listing.contains(k.trim_start_matches("data/").rsplit('/').next().unwrap()),
            "{k} not in:\n{listing}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    run(&format!(
        "python3 -m awscli s3 cp --recursive --only-show-errors s3://{BUCKET}/data/ {} {ep}",
        q(dir.path())
    ))
    .await;
    same_tree(dir.path());
    // The API view of the odd keys, encoded by the CLI itself.
    let keys = run(&format!(
        "python3 -m awscli s3api list-objects-v2 --bucket {BUCKET} --prefix odd/ --query 'Contents[].Key' --output json {ep}"
    ))
    .await;
    assert!(
        keys.contains("a\\u0001b") && keys.contains("c\\rd"),
        "{keys}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rclone_lists_and_copies_through_a_node() {
    let (_o, node) = setup().await;
    let env = format!(
        "unset AWS_CA_BUNDLE; export RCLONE_CONFIG_N_TYPE=s3 RCLONE_CONFIG_N_PROVIDER=Other \
         RCLONE_CONFIG_N_ENDPOINT=http://{} RCLONE_CONFIG_N_ACCESS_KEY_ID={NODE_KEY} \
         RCLONE_CONFIG_N_SECRET_ACCESS_KEY={NODE_SECRET} RCLONE_CONFIG_N_FORCE_PATH_STYLE=true;",
        node.addr
    );
    let listing = run(&format!("{env} rclone lsf -R n:{BUCKET}/data")).await;
    for k in files().keys() {
        assert!(
            listing.lines().any(|l| l == k.trim_start_matches("data/")),
            "{k} not in:\n{listing}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    run(&format!(
        "{env} rclone copy n:{BUCKET}/data {}",
        q(dir.path())
    ))
    .await;
    same_tree(dir.path());
}

/// Unmounts `dir`, waiting out a busy moment.
async fn unmount(dir: &Path) {
    let cmd = format!("fusermount3 -u {d} || fusermount -u {d}", d = q(dir));
    wait_for("unmount", std::time::Duration::from_secs(5), || {
        let cmd = cmd.clone();
        async move { sh(&cmd).await.status.success() }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3fs_mounts_a_node_and_reads_it() {
    let (_o, node) = setup().await;
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let pw = dir.path().join("passwd");
    std::fs::write(&pw, format!("{NODE_KEY}:{NODE_SECRET}\n")).unwrap();
    sh_ok(&format!("chmod 600 {}", q(&pw))).await;
    sh_ok(&format!(
        "s3fs {BUCKET} {} -o url=http://{},use_path_request_style,passwd_file={},nonempty",
        q(&mnt),
        node.addr,
        q(&pw)
    ))
    .await;
    wait_for(
        "s3fs mounts",
        std::time::Duration::from_secs(20),
        || async { is_mounted(&mnt) },
    )
    .await;
    let listing = sh_ok(&format!("ls -R {}", q(&mnt.join("data")))).await;
    let read = std::panic::AssertUnwindSafe(async { same_tree(&mnt.join("data")) });
    let checked = futures_util::FutureExt::catch_unwind(read).await;
    unmount(&mnt).await;
    assert!(listing.contains("three+x.txt"), "{listing}");
    if let Err(p) = checked {
        std::panic::resume_unwind(p);
    }
}

/// The mountpoint-s3 build beside the project (`shared/peers/mount-s3`), or
/// `SHOAL_MOUNT_S3`; the test that needs it fails without it.
fn mount_s3() -> PathBuf {
    let p = std::env::var_os("SHOAL_MOUNT_S3")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/peers/mount-s3")
        });
    assert!(
        p.exists(),
        "mountpoint-s3 is not at {} (set SHOAL_MOUNT_S3 to its binary)",
        p.display()
    );
    p
}

/// mountpoint-s3 cannot be installed from a package registry, so this leg runs
/// where a build of it is at hand: `scripts/test.sh` runs it when it finds one
/// (and says so when it does not); by hand, `cargo test -p shoal-node --test
/// clients -- --ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a mountpoint-s3 build (shared/peers/mount-s3 or SHOAL_MOUNT_S3)"]
async fn mountpoint_s3_mounts_a_node_and_the_test_origin() {
    let bin = mount_s3();
    let (o, node) = setup().await;
    let targets = [
        (
            "node",
            format!("http://{}", node.addr),
            NODE_KEY.to_owned(),
            NODE_SECRET.to_owned(),
        ),
        (
            "test origin",
            o.endpoint(),
            o.options.access_key.clone(),
            o.options.secret_key.clone(),
        ),
    ];
    for (what, endpoint, key, secret) in targets {
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        // Its bucket check lists with max-keys=0 and refuses a truncated answer.
        let out = sh(&format!(
            "AWS_ACCESS_KEY_ID={key} AWS_SECRET_ACCESS_KEY={secret} AWS_EC2_METADATA_DISABLED=true \
             {} {BUCKET} {} --endpoint-url {endpoint} --force-path-style --region us-east-1",
            q(&bin),
            q(&mnt)
        ))
        .await;
        assert!(
            out.status.success(),
            "mountpoint-s3 cannot mount the {what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let read = std::panic::AssertUnwindSafe(async { same_tree(&mnt.join("data")) });
        let checked = futures_util::FutureExt::catch_unwind(read).await;
        unmount(&mnt).await;
        if let Err(p) = checked {
            eprintln!("through mountpoint-s3 on the {what}:");
            std::panic::resume_unwind(p);
        }
    }
}

/// The writes S3 tools make on a gateway, run the same way against moto itself
/// and through a gateway in front of it: the aws CLI's server-side copy and
/// `get-object-attributes`, rclone's `copyto`, `mkdir` and `rmdir` of a bucket,
/// boto3's `copy_object` and `put_object(IfNoneMatch="*")`. Each prints what it
/// got; the two transcripts must be the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_tools_write_through_a_gateway_as_at_the_origin() {
    let moto = Moto::start();
    let section = origin_section(&moto.endpoint, "moto-key", "moto-secret");
    let gateway = start_node(&parse(&node_section(
        &section,
        "",
        "[gateway]\nwrites = true\n",
    )))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.bin");
    std::fs::write(&src, data(300_001, 61)).unwrap();
    sh_ok(&format!(
        "export AWS_ACCESS_KEY_ID=moto-key AWS_SECRET_ACCESS_KEY=moto-secret AWS_DEFAULT_REGION=us-east-1; \
         python3 -m awscli s3 mb s3://{BUCKET} --endpoint-url {ep} && \
         python3 -m awscli s3 cp --only-show-errors {src} s3://{BUCKET}/src.bin --endpoint-url {ep}",
        ep = moto.endpoint,
        src = q(&src)
    ))
    .await;
    let boto3 = dir.path().join("w.py");
    std::fs::write(
        &boto3,
        r#"
import sys, boto3, botocore
from botocore.config import Config
ep, bucket, tag = sys.argv[1:4]
s3 = boto3.client("s3", endpoint_url=ep, region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
r = s3.copy_object(Bucket=bucket, Key="boto-" + tag, CopySource={"Bucket": bucket, "Key": "src.bin"})
print("copy_object", r["CopyObjectResult"]["ETag"])
try:
    s3.put_object(Bucket=bucket, Key="boto-" + tag, Body=b"x", IfNoneMatch="*")
    print("put if-none-match over an object: written")
except botocore.exceptions.ClientError as e:
    print("put if-none-match over an object:", e.response["Error"]["Code"])
r = s3.put_object(Bucket=bucket, Key="new-" + tag, Body=b"x", IfNoneMatch="*")
print("put if-none-match onto a new key:", r["ETag"])
print("head", s3.head_object(Bucket=bucket, Key="boto-" + tag)["ETag"])
up = s3.create_multipart_upload(Bucket=bucket, Key="boto-" + tag)["UploadId"]
part = s3.upload_part(Bucket=bucket, Key="boto-" + tag, UploadId=up, PartNumber=1, Body=b"y" * 1000)["ETag"]
try:
    s3.complete_multipart_upload(Bucket=bucket, Key="boto-" + tag, UploadId=up, IfNoneMatch="*",
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part}]})
    print("complete if-none-match over an object: written")
except botocore.exceptions.ClientError as e:
    print("complete if-none-match over an object:", e.response["Error"]["Code"])
    s3.abort_multipart_upload(Bucket=bucket, Key="boto-" + tag, UploadId=up)
print("head", s3.head_object(Bucket=bucket, Key="boto-" + tag)["ETag"])
"#,
    )
    .unwrap();
    let transcript = |ep: String, key: &'static str, secret: &'static str, tag: &'static str| {
        let (boto3, dir) = (boto3.clone(), dir.path().to_owned());
        async move {
            let env = format!(
                "unset AWS_CA_BUNDLE; export AWS_ACCESS_KEY_ID={key} AWS_SECRET_ACCESS_KEY={secret} \
                 AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true \
                 RCLONE_CONFIG_N_TYPE=s3 RCLONE_CONFIG_N_PROVIDER=Other RCLONE_CONFIG_N_ENDPOINT={ep} \
                 RCLONE_CONFIG_N_ACCESS_KEY_ID={key} RCLONE_CONFIG_N_SECRET_ACCESS_KEY={secret} \
                 RCLONE_CONFIG_N_FORCE_PATH_STYLE=true;"
            );
            let aws = |args: String| format!("{env} python3 -m awscli {args} --endpoint-url {ep}");
            let mut out = Vec::new();
            out.push(
                sh_ok(&aws(format!(
                    "s3 cp --only-show-errors s3://{BUCKET}/src.bin s3://{BUCKET}/cli-{tag}"
                )))
                .await,
            );
            out.push(
                sh_ok(&aws(format!(
                    "s3api head-object --bucket {BUCKET} --key cli-{tag} --query '[ETag,ContentLength]' --output text"
                )))
                .await,
            );
            out.push(
                sh_ok(&aws(format!(
                    "s3api get-object-attributes --bucket {BUCKET} --key src.bin \
                     --object-attributes ETag ObjectSize --query '[ETag,ObjectSize]' --output text"
                )))
                .await,
            );
            out.push(
                sh_ok(&format!(
                    "{env} rclone copyto n:{BUCKET}/src.bin n:{BUCKET}/rc-{tag} && \
                     rclone md5sum n:{BUCKET}/rc-{tag} | cut -d' ' -f1"
                ))
                .await,
            );
            out.push(
                sh_ok(&format!(
                    "{env} rclone mkdir n:made-{tag} && rclone lsd n: | grep -c made-{tag}; \
                     rclone rmdir n:made-{tag} && rclone lsd n: | grep -c made-{tag} || true"
                ))
                .await,
            );
            out.push(sh_ok(&format!("{env} python3 {} {ep} {BUCKET} {tag}", q(&boto3))).await);
            let _ = dir;
            out.join("")
        }
    };
    let direct = transcript(moto.endpoint.clone(), "moto-key", "moto-secret", "x").await;
    let through = transcript(
        format!("http://{}", gateway.addr),
        NODE_KEY,
        NODE_SECRET,
        "x2",
    )
    .await;
    eprintln!("what the tools got, at moto and through the gateway alike:\n{direct}");
    // The tags differ in the names only; what each step got is the same.
    assert_eq!(through, direct, "through the gateway vs at moto");
    assert!(direct.contains("PreconditionFailed"), "{direct}");
    // And the gateway's copies are the origin's objects.
    let heads = sh_ok(&format!(
        "export AWS_ACCESS_KEY_ID=moto-key AWS_SECRET_ACCESS_KEY=moto-secret AWS_DEFAULT_REGION=us-east-1; \
         for k in cli-x2 rc-x2 boto-x2; do python3 -m awscli s3api head-object --bucket {BUCKET} --key $k \
         --query ContentLength --output text --endpoint-url {}; done",
        moto.endpoint
    ))
    .await;
    assert_eq!(heads, "300001\n300001\n300001\n");
}

/// What boto3 writes with the SDK's defaults (CRC32 checksums on every upload,
/// as recent SDKs send them), on a versioned bucket: each line is what one call
/// answered, version ids named only as present or not.
const VERSIONED_SCRIPT: &str = r#"
import hashlib, io, sys, boto3, botocore
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
ep, bucket, tag = sys.argv[1:4]
s3 = boto3.client("s3", endpoint_url=ep, region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
def v(r):
    return "version" if r.get("VersionId") else "NO VERSION"
k = "boto-" + tag
r = s3.put_object(Bucket=bucket, Key=k, Body=b"first", ContentType="text/one")
first = r["VersionId"] if "VersionId" in r else None
print("put", r["ETag"], v(r), "crc32", r.get("ChecksumCRC32"))
r = s3.put_object(Bucket=bucket, Key=k, Body=io.BytesIO(b"second" * 1000), Metadata={"color": "red"})
print("put stream", r["ETag"], v(r), "crc32", r.get("ChecksumCRC32"))
big = bytes(range(256)) * (24 * 4096 + 7)
s3.upload_fileobj(io.BytesIO(big), bucket, k + "-big",
    ExtraArgs={"ContentType": "text/big", "Metadata": {"color": "blue"}},
    Config=TransferConfig(multipart_threshold=8 << 20, multipart_chunksize=8 << 20))
h = s3.head_object(Bucket=bucket, Key=k + "-big", ChecksumMode="ENABLED")
print("upload_fileobj", h["ETag"], h["ContentType"], h["Metadata"], v(h), h.get("PartsCount"))
got = s3.get_object(Bucket=bucket, Key=k + "-big", ChecksumMode="ENABLED")["Body"].read()
print("read back", hashlib.md5(got).hexdigest() == hashlib.md5(big).hexdigest())
if first:
    old = s3.get_object(Bucket=bucket, Key=k, VersionId=first)
    print("first version", old["Body"].read(), old["ContentType"])
r = s3.delete_object(Bucket=bucket, Key=k)
print("delete", r.get("DeleteMarker"), v(r))
try:
    s3.get_object(Bucket=bucket, Key=k)
    print("read after delete: found")
except botocore.exceptions.ClientError as e:
    print("read after delete:", e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPHeaders"].get("x-amz-delete-marker"))
vs = s3.list_object_versions(Bucket=bucket, Prefix=k + "")
print("versions", len([x for x in vs.get("Versions", []) if x["Key"] == k]),
      "markers", len([x for x in vs.get("DeleteMarkers", []) if x["Key"] == k]))
r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k, "VersionId": first}, {"Key": k + "-big"}]})
print("delete_objects", sorted((d["Key"].replace(tag, "T"), bool(d.get("VersionId")), d.get("DeleteMarker", False)) for d in r["Deleted"]))
try:
    s3.complete_multipart_upload(Bucket=bucket, Key=k, UploadId="no-such-upload",
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": "\"d41d8cd98f00b204e9800998ecf8427e\""}]})
except botocore.exceptions.ClientError as e:
    print("complete without create:", e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"])
"#;

/// The tools' uploads into a versioned bucket (moto's) through a gateway: boto3
/// with the SDK's default checksums, the same way at moto itself (the two
/// transcripts alike); the aws CLI's `s3 cp` of 64 MiB (in 8 MiB parts) with a
/// type and metadata; rclone's multipart copy. Each object is then checked at
/// the origin: its type, metadata, version and bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_tools_upload_into_a_versioned_bucket_through_a_gateway() {
    let moto = Moto::start();
    let section = origin_section(&moto.endpoint, "moto-key", "moto-secret");
    let gateway = start_node(&parse(&node_section(
        &section,
        "",
        "[gateway]\nwrites = true\n",
    )))
    .await;
    let gw = format!("http://{}", gateway.addr);
    let at_moto =
        "unset AWS_CA_BUNDLE; export AWS_ACCESS_KEY_ID=moto-key AWS_SECRET_ACCESS_KEY=moto-secret \
         AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true;"
            .to_owned();
    let via = format!(
        "unset AWS_CA_BUNDLE; export AWS_ACCESS_KEY_ID={NODE_KEY} AWS_SECRET_ACCESS_KEY={NODE_SECRET} \
         AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true \
         RCLONE_CONFIG_N_TYPE=s3 RCLONE_CONFIG_N_PROVIDER=Other RCLONE_CONFIG_N_ENDPOINT={gw} \
         RCLONE_CONFIG_N_ACCESS_KEY_ID={NODE_KEY} RCLONE_CONFIG_N_SECRET_ACCESS_KEY={NODE_SECRET} \
         RCLONE_CONFIG_N_FORCE_PATH_STYLE=true;"
    );
    sh_ok(&format!(
        "{at_moto} python3 -m awscli s3 mb s3://{BUCKET} --endpoint-url {ep} >/dev/null && \
         python3 -m awscli s3api put-bucket-versioning --bucket {BUCKET} \
         --versioning-configuration Status=Enabled --endpoint-url {ep}",
        ep = moto.endpoint
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("v.py");
    std::fs::write(&script, VERSIONED_SCRIPT).unwrap();
    let run = |env: &str, ep: &str, tag: &str| {
        format!("{env} python3 {} {ep} {BUCKET} {tag}", q(&script))
    };
    let direct = sh_ok(&run(&at_moto, &moto.endpoint, "xd")).await;
    let through = sh_ok(&run(&via, &gw, "xg")).await;
    eprintln!("boto3 at moto and through the gateway:\n{direct}");
    assert_eq!(through, direct, "boto3 through the gateway vs at moto");
    assert!(!direct.contains("NO VERSION"), "{direct}");

    // The aws CLI: 64 MiB, which it uploads in parts, with what it is stored with.
    let big = dir.path().join("big.bin");
    let body = data(64 << 20, 64);
    let md5 = hex(&md5::Md5::digest(&body));
    std::fs::write(&big, &body).unwrap();
    drop(body);
    sh_ok(&format!(
        "{via} python3 -m awscli s3 cp --only-show-errors {} s3://{BUCKET}/cli/big.bin \
         --content-type text/bla --metadata color=violet --endpoint-url {gw}",
        q(&big)
    ))
    .await;
    let head = sh_ok(&format!(
        "{at_moto} python3 -m awscli s3api head-object --bucket {BUCKET} --key cli/big.bin \
         --query '[ContentType,Metadata.color,ContentLength,ETag,VersionId!=null]' --output text \
         --endpoint-url {}",
        moto.endpoint
    ))
    .await;
    let fields: Vec<&str> = head.split_whitespace().collect();
    assert_eq!(fields[..3], ["text/bla", "violet", "67108864"], "{head}");
    assert!(fields[3].ends_with("-8\""), "a multipart ETag: {head}");
    assert_eq!(fields[4], "True", "a version id: {head}");
    let back = dir.path().join("back.bin");
    sh_ok(&format!(
        "{via} python3 -m awscli s3 cp --only-show-errors s3://{BUCKET}/cli/big.bin {} --endpoint-url {gw}",
        q(&back)
    ))
    .await;
    assert_eq!(hex(&md5::Md5::digest(std::fs::read(&back).unwrap())), md5);
    std::fs::remove_file(&back).unwrap();

    // rclone: a multipart copy (5 MiB parts) of a 12 MiB file, then its check.
    let mid = dir.path().join("rc/mid.bin");
    std::fs::create_dir_all(mid.parent().unwrap()).unwrap();
    std::fs::write(&mid, &std::fs::read(&big).unwrap()[..12 << 20]).unwrap();
    std::fs::remove_file(&big).unwrap();
    sh_ok(&format!(
        "{via} rclone copy --s3-upload-cutoff 5M --s3-chunk-size 5M {} n:{BUCKET}/rc && \
         rclone check --one-way {} n:{BUCKET}/rc",
        q(mid.parent().unwrap()),
        q(mid.parent().unwrap())
    ))
    .await;
    let head = sh_ok(&format!(
        "{at_moto} python3 -m awscli s3api head-object --bucket {BUCKET} --key rc/mid.bin \
         --query '[ContentLength,ETag,VersionId!=null]' --output text --endpoint-url {}",
        moto.endpoint
    ))
    .await;
    let fields: Vec<&str> = head.split_whitespace().collect();
    assert_eq!(fields[0], "12582912", "{head}");
    assert!(fields[1].ends_with("-3\""), "a multipart ETag: {head}");
    assert_eq!(fields[2], "True", "a version id: {head}");
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
