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
    assert!(n >= 5, "expected the five example configs, found {n}");

    let node = shoal::config::Config::load(&root.join("node.toml")).unwrap();
    assert!(node.origin().is_ok() && node.node().is_ok() && node.auth().is_ok());
    let gw = shoal::config::Config::load(&root.join("gateway.toml")).unwrap();
    assert_eq!(gw.cluster().unwrap().block_size, 4 << 20);

    // The configs shipped inside the Kubernetes ConfigMaps load too, in a node
    // pod (statefulset.yaml gives it POD_IP): the nodes' and the reader's, the
    // CSI driver's, the local-PV overlay's node.toml.
    std::env::set_var("POD_IP", "10.0.3.7");
    let mut found = 0;
    for cm in [
        "base/configmap.yaml",
        "csi/configmap.yaml",
        "overlays/local-pv/configmap.yaml",
    ] {
        let cm = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("packaging/kubernetes")
                .join(cm),
        )
        .unwrap_or_else(|e| panic!("{cm}: {e}"));
        for (name, body) in embedded_files(&cm) {
            let cfg = shoal::config::Config::parse(&body, &name, &shoal::config::ProcessEnv)
                .unwrap_or_else(|e| panic!("configmap {e}"));
            assert_eq!(
                cfg.origin().unwrap().credentials,
                shoal::config::CredentialMode::Chain { profile: None },
                "{name}: origin credentials come from the pod's role, not keys"
            );
            if name == "node.toml" {
                assert!(cfg.node().is_ok() && cfg.auth().is_ok());
                assert!(cfg.cluster().is_some(), "node pods pass purges on");
                assert_eq!(cfg.node().unwrap().id.as_deref(), Some("10.0.3.7:9100"));
            }
            let Some(shoal::config::Membership::Kubernetes(svc)) =
                cfg.cluster().map(|c| &c.membership)
            else {
                panic!("{name}: the nodes are not the Service's endpoints");
            };
            assert_eq!(
                (
                    svc.namespace.as_str(),
                    svc.service.as_str(),
                    svc.port.as_deref()
                ),
                ("shoal", "shoal-node", Some("s3")),
                "{name}: not the Service of service.yaml"
            );
            found += 1;
        }
    }
    assert_eq!(
        found, 4,
        "node.toml and mount.toml in base/, mount.toml in csi/, node.toml in overlays/local-pv/"
    );
}

/// `  NAME: |` blocks of a ConfigMap's data, dedented.
fn embedded_files(yaml: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in yaml.lines() {
        if let Some(name) = line
            .strip_prefix("  ")
            .and_then(|l| l.strip_suffix(": |"))
            .filter(|n| !n.starts_with(' '))
        {
            out.push((name.to_owned(), String::new()));
        } else if let Some((_, body)) = out.last_mut() {
            if let Some(l) = line.strip_prefix("    ") {
                body.push_str(l);
                body.push('\n');
            } else if line.trim().is_empty() {
                body.push('\n');
            } else {
                break;
            }
        }
    }
    out
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
