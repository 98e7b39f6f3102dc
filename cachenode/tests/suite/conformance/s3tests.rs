//! ceph/s3-tests' write-side tests, run against moto directly and through a
//! gateway (writes on) in front of the same moto: every test that passes at moto
//! must pass through the gateway. Needs a checkout of s3-tests (at
//! `$SHOAL_S3_TESTS`, else `target/s3-tests`) and its Python packages
//! (scripts/test.sh installs them); where there is none the test says so and
//! passes. `$SHOAL_S3_TESTS_K` widens the selection (a pytest `-k` expression)
//! from the quick one below to, say, every multipart, copy, delete, tagging,
//! ACL, versioning and object-lock test.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common::*;

/// Tests of each kind of write a gateway passes on, quick enough for every run.
const QUICK: &[&str] = &[
    "test_multipart_upload",
    "test_multipart_upload_small",
    "test_multipart_upload_contents",
    "test_multipart_upload_overwrite_existing_object",
    "test_multipart_upload_size_too_small",
    "test_multipart_upload_missing_part",
    "test_multipart_upload_incorrect_etag",
    "test_abort_multipart_upload",
    "test_abort_multipart_upload_not_found",
    "test_list_multipart_upload",
    "test_multipart_copy_small",
    "test_multipart_copy_versioned",
    "test_object_copy_same_bucket",
    "test_object_copy_to_itself_with_metadata",
    "test_object_copy_retaining_metadata",
    "test_object_copy_replacing_metadata",
    "test_object_copy_versioned_bucket",
    "test_object_copy_not_owned_bucket",
    "test_multi_object_delete",
    "test_multi_objectv2_delete",
    "test_object_write_with_chunked_transfer_encoding",
    "test_object_write_check_etag",
    "test_object_write_cache_control",
    "test_object_set_get_metadata_none_to_good",
    "test_object_metadata_replaced_on_put",
    "test_versioning_obj_create_read_remove",
    "test_versioning_obj_create_read_remove_head",
    "test_versioning_obj_plain_null_version_removal",
    "test_versioning_obj_suspend_versions",
    "test_versioning_obj_create_overwrite_multipart",
    "test_versioning_multi_object_delete",
    "test_versioning_multi_object_delete_with_marker",
    "test_versioned_object_acl",
    "test_put_obj_with_tags",
    "test_put_max_tags",
    "test_get_obj_tagging",
    "test_delete_tags_obj_public",
    "test_object_acl_default",
    "test_encryption_sse_c_method_head",
    "test_encryption_sse_c_multipart_upload",
    "test_sse_kms_multipart_upload",
    "test_object_lock_put_obj_lock",
    "test_object_lock_uploading_obj",
];

/// Where a checkout of ceph/s3-tests is, if there is one.
fn checkout() -> Option<PathBuf> {
    let dir = std::env::var_os("SHOAL_S3_TESTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/s3-tests"));
    dir.join("s3tests/functional/test_s3.py")
        .exists()
        .then_some(dir)
}

/// An s3-tests configuration for an endpoint on 127.0.0.1, its users' keys
/// `KEY`/`KEY-secret`.
fn conf(port: u16, keys: &BTreeMap<&str, String>) -> String {
    let mut c = format!(
        "[DEFAULT]\nhost = 127.0.0.1\nport = {port}\nis_secure = False\nssl_verify = False\n\
         [fixtures]\nbucket prefix = s3t-{{random}}-\n"
    );
    for (section, key) in keys {
        let name = section.replace(' ', "");
        c.push_str(&format!(
            "[{section}]\ndisplay_name = {name}\nuser_id = {name}\nemail = {name}@example.com\n\
             api_name = us-east-1\ntenant = {name}\naccess_key = {key}\nsecret_key = {key}-secret\n"
        ));
    }
    c
}

/// Runs the selection (pytest arguments) with `conf_file`; each test's outcome
/// by name.
async fn run(dir: &Path, conf_file: &Path, select: &[String]) -> BTreeMap<String, String> {
    let out = tokio::process::Command::new("python3")
        .args(["-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider"])
        .args(select)
        .env("S3TEST_CONF", conf_file)
        .current_dir(dir)
        .output()
        .await
        .expect("python3 with pytest");
    let text = String::from_utf8_lossy(&out.stdout);
    let outcomes: BTreeMap<String, String> = text
        .lines()
        .filter_map(|l| {
            let (outcome, rest) = l.split_once(' ')?;
            if !matches!(outcome, "PASSED" | "FAILED" | "ERROR") {
                return None;
            }
            let name = rest.split(" - ").next()?.rsplit("::").next()?.to_owned();
            let why = rest.split_once(" - ").map_or("", |(_, w)| w);
            Some((name, format!("{outcome} {why}").trim().to_owned()))
        })
        .collect();
    assert!(
        !outcomes.is_empty(),
        "pytest ran nothing:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    outcomes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a checkout of ceph/s3-tests; scripts/test.sh runs it where there is one"]
async fn s3_tests_pass_through_a_gateway_as_at_moto() {
    let Some(dir) = checkout() else {
        eprintln!("s3-tests NOT run: no checkout at $SHOAL_S3_TESTS or target/s3-tests");
        return;
    };
    const FILE: &str = "s3tests/functional/test_s3.py";
    let select: Vec<String> = match std::env::var("SHOAL_S3_TESTS_K") {
        Ok(k) => vec![FILE.into(), "-k".into(), k],
        // By node id: `-k NAME` would take every name containing NAME.
        Err(_) => QUICK.iter().map(|t| format!("{FILE}::{t}")).collect(),
    };
    let keys: BTreeMap<&str, String> = [
        ("s3 main", "s3tmain"),
        ("s3 alt", "s3talt"),
        ("s3 tenant", "s3ttenant"),
        ("iam", "s3tiam"),
        ("iam root", "s3troot"),
        ("iam alt root", "s3taltroot"),
    ]
    .into_iter()
    .map(|(s, k)| (s, k.to_owned()))
    .collect();
    let moto = Moto::start();
    let section = origin_section(&moto.endpoint, "moto-key", "moto-secret");
    let users: String = keys
        .values()
        .map(|k| {
            format!("[[auth.keys]]\naccess_key_id = \"{k}\"\nsecret_access_key = \"{k}-secret\"\nallow = [\"*:*\"]\n")
        })
        .collect();
    let gateway = start_node(&parse(&node_section(
        &section,
        "",
        &format!("{users}[gateway]\nwrites = true\n"),
    )))
    .await;
    let files = tempfile::tempdir().unwrap();
    let port = |ep: &str| ep.rsplit(':').next().unwrap().parse::<u16>().unwrap();
    let direct_conf = files.path().join("direct.conf");
    std::fs::write(&direct_conf, conf(port(&moto.endpoint), &keys)).unwrap();
    let gateway_conf = files.path().join("gateway.conf");
    std::fs::write(&gateway_conf, conf(gateway.addr.port(), &keys)).unwrap();

    let direct = run(&dir, &direct_conf, &select).await;
    let through = run(&dir, &gateway_conf, &select).await;
    let passed = |m: &BTreeMap<String, String>| m.values().filter(|o| *o == "PASSED").count();
    eprintln!(
        "s3-tests: {} selected; moto passes {}, the gateway {}",
        direct.len(),
        passed(&direct),
        passed(&through)
    );
    let mut lost = Vec::new();
    for (name, outcome) in &direct {
        let via = through.get(name).map_or("not run", String::as_str);
        if outcome == "PASSED" && via != "PASSED" {
            lost.push(format!("{name}: {via}"));
        }
        if outcome != "PASSED" && via == "PASSED" {
            eprintln!("passes only through the gateway: {name} (at moto: {outcome})");
        }
    }
    assert!(
        lost.is_empty(),
        "{} tests pass at moto and not through the gateway:\n{}",
        lost.len(),
        lost.join("\n")
    );
}
