//! Every example under config/ loads, so the examples never rot.

use std::path::Path;

#[test]
fn every_example_config_loads() {
    // The examples name these variables for their secrets.
    for v in [
        "SHOAL_ORIGIN_SECRET",
        "SHOAL_CLUSTER_SECRET",
        "SHOAL_ORIGIN_KEY",
        "SHOAL_APP_SECRET",
    ] {
        std::env::set_var(v, "example-secret");
    }
    // mount.toml reads the default profile of this credentials file.
    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join("credentials");
    std::fs::write(
        &creds,
        "[default]\naws_access_key_id = a\naws_secret_access_key = b\n",
    )
    .unwrap();
    std::env::set_var("AWS_SHARED_CREDENTIALS_FILE", &creds);

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut n = 0;
    for entry in std::fs::read_dir(&root).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            shoal::config::Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    assert!(n >= 4, "expected the four example configs, found {n}");

    let node = shoal::config::Config::load(&root.join("node.toml")).unwrap();
    assert!(node.origin().is_ok() && node.node().is_ok() && node.auth().is_ok());
    let gw = shoal::config::Config::load(&root.join("gateway.toml")).unwrap();
    assert_eq!(gw.cluster().unwrap().block_size, 4 << 20);
}

#[test]
fn missing_file_is_named() {
    let e = shoal::config::Config::load(Path::new("/nonexistent/shoal.toml")).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("/nonexistent/shoal.toml: cannot read config file"),
        "{e}"
    );
}
