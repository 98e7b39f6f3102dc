use std::collections::HashMap;
use std::time::Duration;

use super::*;

struct MapEnv(HashMap<String, String>);
impl Env for MapEnv {
    fn var(&self, n: &str) -> Option<String> {
        self.0.get(n).cloned()
    }
    fn read_file(&self, p: &str) -> Option<String> {
        self.0.get(&format!("file:{p}")).cloned()
    }
}

fn env() -> MapEnv {
    MapEnv(
        [
            ("NODE_SECRET", "from-env"),
            ("file:/etc/not-pem", "hello"),
            ("SHORT_KEY", "c2hvcnQ="),
            ("NOT_B64", "!!!"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    )
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, "test.toml", &env())
}

/// Asserts `text` is refused with an error naming `key` and containing `needle`.
fn refused(text: &str, key: &str, needle: &str) {
    let e = parse(text).expect_err(text);
    assert_eq!(e.file, "test.toml");
    assert_eq!(e.key, key, "wrong key for {text:?}: {e}");
    assert!(
        e.message.contains(needle),
        "message {:?} lacks {needle:?}",
        e.message
    );
    let shown = e.to_string();
    assert!(
        shown.starts_with("test.toml: ") && shown.contains(key),
        "{shown}"
    );
}

const ORIGIN: &str = "[origin]\nendpoint = \"http://127.0.0.1:9000\"\ncredentials = { access_key_id = \"a\", secret_access_key = \"s\" }\n";

#[test]
fn defaults_follow_design() {
    let c = parse("[cluster]\nnodes = [\"10.0.1.5:9000\"]\n[node]\n").unwrap();
    let cl = c.cluster().unwrap();
    assert_eq!(cl.block_size, 1 << 20);
    assert_eq!(cl.read_window, 8);
    assert_eq!(cl.load_limit, 256);
    assert_eq!(cl.down_for, Duration::from_secs(5));
    assert_eq!(c.node().unwrap().block_size, 1 << 20);
    assert_eq!(
        c.node().unwrap().peer_fill_timeout,
        Duration::from_millis(150)
    );
    assert!(c.origin().is_err());
    let off = parse("[node]\npeer_fill_timeout = \"0s\"\n").unwrap();
    assert!(off.node().unwrap().peer_fill_timeout.is_zero());
    assert_eq!(
        parse("[node]\n")
            .unwrap()
            .node()
            .unwrap()
            .stop_flush_timeout,
        Duration::from_secs(10)
    );
    let off = parse("[node]\nstop_flush_timeout = \"0s\"\n").unwrap();
    assert!(off.node().unwrap().stop_flush_timeout.is_zero());
}

#[test]
fn node_ids_are_canonical() {
    assert_eq!(
        canonical_node_id("Cache-1.Example.COM:9000").unwrap(),
        "cache-1.example.com:9000"
    );
    assert_eq!(canonical_node_id("[::1]:80").unwrap(), "[::1]:80");
    assert!(canonical_node_id("host").is_err());
    assert!(canonical_node_id("host:0").is_err());
    assert!(canonical_node_id("::1:80").is_err());
    assert!(canonical_node_id("host:99999").is_err());
}

#[test]
fn weighted_and_zoned_nodes() {
    let c = parse("[cluster]\nzone = \"a\"\nnodes = [\"A:1\", { id = \"b:2\", weight = 2.5, zone = \"a\" }]\n").unwrap();
    let Membership::Static(n) = &c.cluster().unwrap().membership else {
        panic!()
    };
    assert_eq!(
        n[0],
        NodeSpec {
            id: "a:1".into(),
            weight: 1.0,
            zone: None
        }
    );
    assert_eq!(n[1].weight, 2.5);
    assert_eq!(n[1].zone.as_deref(), Some("a"));
}

#[test]
fn secrets_from_env() {
    let c = parse(&format!(
        "{ORIGIN}[auth]\n[[auth.keys]]\naccess_key_id = \"k\"\nsecret_access_key_env = \"NODE_SECRET\"\n"
    ))
    .unwrap();
    let AuthConfig::SigV4 { keys, .. } = c.auth().unwrap() else {
        panic!()
    };
    assert_eq!(keys[0].credentials.secret_access_key, "from-env");
}

#[test]
fn unknown_key() {
    refused(
        "[cluster]\nnodes = [\"a:1\"]\nblock_sise = \"1MiB\"\n",
        "cluster.block_sise",
        "unknown field `block_sise`",
    );
    let e = parse("[cluster]\nnodes = [\"a:1\"]\nblock_sise = \"1MiB\"\n").unwrap_err();
    assert!(e.message.contains("(line 3)"), "{e}");
}

#[test]
fn unknown_section() {
    refused("[clutser]\n", "clutser", "unknown field `clutser`");
}

#[test]
fn bad_size() {
    refused(
        "[cluster]\nnodes = [\"a:1\"]\nblock_size = \"big\"\n",
        "cluster.block_size",
        "not a size",
    );
}

#[test]
fn bad_duration() {
    refused(
        "[cluster]\nnodes = [\"a:1\"]\ndown_for = 5\n",
        "cluster.down_for",
        "has no unit",
    );
    refused(
        "[cluster]\nnodes = [\"a:1\"]\ndown_for = \"soon\"\n",
        "cluster.down_for",
        "not a duration",
    );
}

#[test]
fn block_size_not_multiple_of_node_block() {
    refused(
        "[node]\nblock_size = \"1MiB\"\n[cluster]\nnodes = [\"a:1\"]\nblock_size = \"1536KiB\"\n",
        "cluster.block_size",
        "not a multiple of node.block_size",
    );
}

#[test]
fn empty_node_list_without_dns() {
    refused(
        "[cluster]\nnodes = []\n",
        "cluster.nodes",
        "is empty and no dns",
    );
    refused(
        "[cluster]\nread_window = 4\n",
        "cluster.nodes",
        "no nodes, no dns name and no kubernetes Service",
    );
}

#[test]
fn dns_without_port() {
    refused(
        "[cluster]\ndns = \"cache.svc.local\"\n",
        "cluster.dns",
        "has no port",
    );
}

#[test]
fn nodes_and_dns_together() {
    refused(
        "[cluster]\nnodes = [\"a:1\"]\ndns = \"x:1\"\n",
        "cluster.dns",
        "not both",
    );
}

#[test]
fn secret_inline_and_env() {
    refused(
        "[origin]\ncredentials = { access_key_id = \"a\", secret_access_key = \"s\", secret_access_key_env = \"X\" }\n",
        "origin.credentials.secret_access_key",
        "both inline and by secret_access_key_env",
    );
}

#[test]
fn secret_env_unset() {
    refused(
        "[origin]\ncredentials = { access_key_id = \"a\", secret_access_key_env = \"NOPE_NOT_SET\" }\n",
        "origin.credentials.secret_access_key_env",
        "NOPE_NOT_SET is not set",
    );
}

#[test]
fn bad_weight() {
    refused(
        "[cluster]\nnodes = [{ id = \"a:1\", weight = 0.0 }]\n",
        "cluster.nodes[0].weight",
        "greater than 0",
    );
    refused(
        "[cluster]\nnodes = [{ id = \"a:1\", weight = nan }]\n",
        "cluster.nodes[0].weight",
        "finite",
    );
}

#[test]
fn duplicate_node() {
    refused(
        "[cluster]\nnodes = [\"a:1\", \"A:1\"]\n",
        "cluster.nodes[1]",
        "listed twice",
    );
}

#[test]
fn bad_endpoint() {
    refused(
        "[origin]\nendpoint = \"ftp://x\"\ncredentials = { anonymous = true }\n",
        "origin.endpoint",
        "http:// or https://",
    );
    refused(
        "[origin]\nendpoint = \"not a url\"\ncredentials = { anonymous = true }\n",
        "origin.endpoint",
        "not a URL",
    );
}

#[test]
fn auth_without_keys_or_none() {
    refused("[auth]\n", "auth.keys", "mode = \"none\"");
    refused(
        "[auth]\nmode = \"open\"\n",
        "auth.mode",
        "not \"sigv4\" or \"none\"",
    );
    let c = parse("[node]\n").unwrap();
    let e = c.auth().unwrap_err();
    assert!(e.message.contains("mode = \"none\""), "{e}");
}

#[test]
fn bad_listen_and_modes() {
    refused(
        "[node]\nlisten = \"localhost\"\n",
        "node.listen",
        "not an address",
    );
    refused("[mount]\nfile_mode = \"rw\"\n", "mount.file_mode", "octal");
}

#[test]
fn disk_without_dir() {
    refused(
        "[cache]\ndisk_size = \"1GiB\"\n",
        "cache.data_dir",
        "data_dir",
    );
}

#[test]
fn hedge_budget_range() {
    refused(
        "[cluster]\nnodes = [\"a:1\"]\nhedge_budget = 1.5\n",
        "cluster.hedge_budget",
        "fraction",
    );
}

#[test]
fn mount_prefetch_files() {
    assert_eq!(parse("").unwrap().mount.prefetch_files, 32);
    let c = parse("[mount]\nprefetch_files = 0\n").unwrap();
    assert_eq!(c.mount.prefetch_files, 0);
    refused(
        "[mount]\nprefetch_files = 5000\n",
        "mount.prefetch_files",
        "out of range",
    );
    let e = parse("[mount]\nprefetch_files = -1\n").unwrap_err();
    assert_eq!(e.key, "mount.prefetch_files");
}

#[test]
fn mount_splice_reads() {
    assert!(parse("").unwrap().mount.splice_reads);
    let c = parse("[mount]\nsplice_reads = false\n").unwrap();
    assert!(!c.mount.splice_reads);
    let e = parse("[mount]\nsplice_reads = \"no\"\n").unwrap_err();
    assert_eq!(e.key, "mount.splice_reads");
}

#[test]
fn mount_disk_cache() {
    assert!(parse("").unwrap().mount.disk_cache.is_none());
    let c = parse("[mount]\ndisk_cache = \"/var/cache/m\"\n").unwrap();
    assert_eq!(
        c.mount.disk_cache,
        Some(("/var/cache/m".into(), 10 << 30)),
        "a directory alone gets the default size"
    );
    let c = parse("[mount]\ndisk_cache = \"/c\"\ndisk_cache_size = \"1GiB\"\n").unwrap();
    assert_eq!(c.mount.disk_cache, Some(("/c".into(), 1 << 30)));
    refused(
        "[mount]\ndisk_cache_size = \"1GiB\"\n",
        "mount.disk_cache_size",
        "directory is needed",
    );
    refused(
        "[mount]\ndisk_cache = \"/c\"\ndisk_cache_size = \"1MiB\"\n",
        "mount.disk_cache_size",
        "64MiB",
    );
    refused("[mount]\ndisk_cache = \"\"\n", "mount.disk_cache", "empty");
}

#[test]
fn wrong_type_names_key_and_line() {
    let e = parse("[cluster]\nnodes = [\"a:1\"]\nread_window = \"eight\"\n").unwrap_err();
    assert_eq!(e.key, "cluster.read_window");
    assert!(e.message.contains("line 3"), "{e}");
}

#[test]
fn gateway_cluster_keys() {
    let c = parse(
        "[cluster]\nnodes = [\"a:1\"]\nmode = \"eventual\"\nhop_limit = 2\npeers = [\"G:9\"]\nbreaker_failures = 5\nbreaker_cooldown = \"1m\"\npeer_concurrency = 8\npeer_queue_wait = \"50ms\"\n",
    )
    .unwrap();
    let cl = c.cluster().unwrap();
    assert_eq!(cl.mode, ClusterMode::Eventual);
    assert_eq!(cl.hop_limit, 2);
    assert_eq!(cl.peers, vec!["g:9".to_owned()]);
    assert_eq!(cl.breaker.failures, 5);
    assert_eq!(cl.breaker.cooldown, Duration::from_secs(60));
    assert_eq!(cl.peer_concurrency, 8);
    assert_eq!(cl.peer_queue_wait, Duration::from_millis(50));
    let d = parse("[cluster]\nnodes = [\"a:1\"]\n").unwrap();
    assert_eq!(d.cluster().unwrap().mode, ClusterMode::Strong);
    assert_eq!(d.cluster().unwrap().hop_limit, 1);
    refused(
        "[cluster]\nnodes = [\"a:1\"]\nmode = \"weak\"\n",
        "cluster.mode",
        "not a mode",
    );
    refused(
        "[cluster]\nnodes = [\"a:1\"]\nbreaker_failures = 0\n",
        "cluster.breaker_failures",
        "at least 1",
    );
    refused(
        "[cluster]\nnodes = [\"a:1\"]\npeer_concurrency = 0\n",
        "cluster.peer_concurrency",
        "at least 1",
    );
    refused(
        "[cluster]\nnodes = [\"a:1\"]\npeers = [\"nohost\"]\n",
        "cluster.peers",
        "no port",
    );
    refused(
        "[gateway]\nwrite = true\n",
        "gateway.write",
        "unknown field",
    );
    let n = parse("[node]\nid = \"Node-1.svc:9000\"\n").unwrap();
    assert_eq!(n.node().unwrap().id.as_deref(), Some("node-1.svc:9000"));
    refused("[node]\nid = \"node-1\"\n", "node.id", "no port");
}

#[test]
fn rules_are_checked() {
    let c = parse("[[rules]]\npattern = \"b/**\"\npage_size = \"16MiB\"\nttl = \"1h\"\n").unwrap();
    assert_eq!(c.rules.len(), 1);
    assert_eq!(c.rules[0].block_size, Some(16 << 20));
    assert!(c.rules[0].matcher.is_match("b/x/y"));
    refused(
        "[[rules]]\ncache = true\n",
        "rules[0].pattern",
        "needs a pattern",
    );
    refused(
        "[[rules]]\npattern = \"b/**\"\n[[rules]]\npattern = \"b/[x\"\n",
        "rules[1].pattern",
        "not a glob",
    );
    refused(
        "[[rules]]\npattern = \"b/**\"\nblock_size = \"1MiB\"\npage_size = \"1MiB\"\n",
        "rules[0].page_size",
        "not both",
    );
    refused(
        "[[rules]]\npattern = \"b/**\"\ncache = false\nttl = \"1s\"\n",
        "rules[0].cache",
        "caches nothing",
    );
    refused(
        "[[rules]]\npattern = \"b/**\"\nblock_size = \"1KiB\"\n",
        "rules[0].block_size",
        "out of range",
    );
    refused("[node]\nmax_age = \"0s\"\n", "node.max_age", "");
    refused(
        "[node]\nheader_read_timeout = \"0s\"\n",
        "node.header_read_timeout",
        "greater than zero",
    );
    refused(
        "[node]\nidle_timeout = \"0s\"\n",
        "node.idle_timeout",
        "greater than zero",
    );
    refused(
        "[node]\nmax_connections = 0\n",
        "node.max_connections",
        "at least 1",
    );
    refused(
        "[node]\nmax_connections = 2000000\n",
        "node.max_connections",
        "above 1048576",
    );
}

#[test]
fn flags_meet_the_bounds_of_the_keys_they_set() {
    let with = |text: &str, over: &Overrides| Config::parse_with(text, "test.toml", &env(), over);
    let wide = Overrides {
        read_window: Some(2000),
        ..Default::default()
    };
    // With a [cluster] and without one (a plain S3 mount), the flag's bounds are the
    // key's, and the error names the flag.
    for text in ["", "[cluster]\nnodes = [\"a:1\"]\n"] {
        let e = with(text, &wide).unwrap_err();
        assert_eq!(
            (e.file.as_str(), e.key.as_str()),
            ("command line", "--read-window")
        );
        assert!(e.message.contains("out of range 1..=1024"), "{e}");
        let zero = Overrides {
            read_window: Some(0),
            ..Default::default()
        };
        assert_eq!(with(text, &zero).unwrap_err().key, "--read-window");
    }
    let four = Overrides {
        read_window: Some(4),
        ..Default::default()
    };
    assert_eq!(
        with("", &four)
            .unwrap()
            .reader_cluster()
            .unwrap()
            .read_window,
        4
    );
    assert!(parse("").unwrap().reader_cluster().is_none());
    let c = with("[cluster]\nnodes = [\"a:1\"]\nread_window = 16\n", &four).unwrap();
    assert_eq!(c.cluster().unwrap().read_window, 4);
    // A flag can supply what the file needs: --data-dir for a disk tier.
    let disk = "[cache]\ndisk_size = \"1GiB\"\n";
    assert_eq!(parse(disk).unwrap_err().key, "cache.data_dir");
    let dir = Overrides {
        data_dir: Some("/var/cache/shoal".into()),
        ..Default::default()
    };
    assert!(with(disk, &dir).unwrap().cache.data_dir.is_some());
    let bad = Overrides {
        prefetch_files: Some(5000),
        ..Default::default()
    };
    let e = with("", &bad).unwrap_err();
    assert_eq!(
        e.to_string(),
        "command line: --prefetch-files: 5000 is out of range 0..=4096"
    );
    // An origin from flags only where the file has none.
    let ep = Overrides {
        endpoint: Some("http://127.0.0.1:9".into()),
        ..Default::default()
    };
    assert!(with(ORIGIN, &ep)
        .unwrap_err()
        .message
        .contains("only without an [origin]"));
    let keys = MapEnv(
        [("AWS_ACCESS_KEY_ID", "a"), ("AWS_SECRET_ACCESS_KEY", "s")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    let c = Config::parse_with("", "test.toml", &keys, &ep).unwrap();
    assert_eq!(c.origin().unwrap().endpoint.as_str(), "http://127.0.0.1:9/");
}

#[test]
fn a_ram_tier_must_hold_a_block() {
    refused(
        "[node]\n[cache]\nram_size = \"512KiB\"\n",
        "cache.ram_size",
        "at least 1.0 MiB",
    );
    refused(
        "[node]\n[cache]\nram_size = \"4MiB\"\n[[rules]]\npattern = \"b/**\"\nblock_size = \"8MiB\"\n",
        "cache.ram_size",
        "blocks here are 8.0 MiB",
    );
    refused(
        "[cluster]\nnodes = [\"a:1\"]\nblock_size = \"2MiB\"\n[cache]\nram_size = \"1MiB\"\n",
        "cache.ram_size",
        "2.0 MiB",
    );
    assert!(parse("[node]\n[cache]\nram_size = 0\n").is_ok());
    assert!(parse("[node]\n[cache]\nram_size = \"4MiB\"\n").is_ok());
    let small = Overrides {
        ram_size: Some(units::Size(4096)),
        ..Default::default()
    };
    let e = Config::parse_with("", "test.toml", &env(), &small).unwrap_err();
    assert_eq!(e.key, "--cache-size");
}

#[test]
fn origin_network_and_request_options_are_checked() {
    refused(
        "[origin]\nca_bundle = \"/nowhere.pem\"\n",
        "origin.ca_bundle",
        "cannot read /nowhere.pem",
    );
    refused(
        "[origin]\nca_bundle = \"/etc/not-pem\"\n",
        "origin.ca_bundle",
        "no PEM certificates",
    );
    refused(
        "[cluster]\nnodes = [\"a:1\"]\nca_bundle = \"/etc/not-pem\"\n",
        "cluster.ca_bundle",
        "no PEM",
    );
    refused(
        "[origin]\nproxy = \"socks://x\"\n",
        "origin.proxy",
        "not an http",
    );
    refused(
        "[cluster]\nnodes = [\"a:1\"]\nproxy = \"nope\"\n",
        "cluster.proxy",
        "not an http",
    );
    refused(
        "[origin]\nexpected_bucket_owner = \"12\"\n",
        "origin.expected_bucket_owner",
        "12-digit",
    );
    refused(
        "[origin]\nsse_customer_key_env = \"UNSET\"\n",
        "origin.sse_customer_key_env",
        "UNSET is not set",
    );
    refused(
        "[origin]\nsse_customer_key_env = \"SHORT_KEY\"\n",
        "origin.sse_customer_key_env",
        "32",
    );
    refused(
        "[origin]\nsse_customer_key_env = \"NOT_B64\"\n",
        "origin.sse_customer_key_env",
        "not base64",
    );
    refused(
        "[origin]\nendpoint = \"http://x:1\"\nfips = true\n",
        "origin.fips",
        "AWS's own endpoints",
    );
    refused(
        "[origin]\nregion = \"no such/region\"\n",
        "origin.region",
        "not a region name",
    );
    refused(
        "[cluster]\nnodes = [\"a:1\"]\n[cluster.credentials]\nprofile = \"p\"\n",
        "cluster.credentials.profile",
        "write them",
    );
}

#[test]
fn aws_endpoints_follow_the_region_and_switches() {
    let c = parse("[origin]\nregion = \"eu-west-1\"\nfips = true\ndual_stack = true\n").unwrap();
    let o = c.origin().unwrap();
    assert_eq!(
        o.endpoint.as_str(),
        "https://s3-fips.dualstack.eu-west-1.amazonaws.com/"
    );
    assert_eq!(o.addressing, Addressing::Virtual);
    assert_eq!(o.credentials, CredentialMode::Chain { profile: None });
    let c = parse("[origin]\nendpoint = \"http://minio:9000\"\n").unwrap();
    assert_eq!(c.origin().unwrap().addressing, Addressing::Path);
    assert!(c.origin().unwrap().aws.is_none());
    // The region from the environment, then the profile's.
    let mut e = env();
    e.0.insert("AWS_REGION".into(), "ap-south-1".into());
    let c = Config::parse("[origin]\n", "t.toml", &e).unwrap();
    assert_eq!(c.origin().unwrap().region, "ap-south-1");
    assert_eq!(
        c.origin().unwrap().endpoint.as_str(),
        "https://s3.ap-south-1.amazonaws.com/"
    );
    let mut e = env();
    e.0.insert("AWS_CONFIG_FILE".into(), "/cfg".into());
    e.0.insert(
        "file:/cfg".into(),
        "[profile dev]\nregion = sa-east-1\n".into(),
    );
    let c = Config::parse("[origin.credentials]\nprofile = \"dev\"\n", "t.toml", &e).unwrap();
    assert_eq!(c.origin().unwrap().region, "sa-east-1");
    // An override keeps the host, signs for the region, addresses by path.
    let mut e = env();
    e.0.insert("AWS_ENDPOINT_URL_S3".into(), "http://127.0.0.1:9000".into());
    let c = Config::parse("[origin]\n", "t.toml", &e).unwrap();
    let o = c.origin().unwrap();
    assert_eq!(o.endpoint.as_str(), "http://127.0.0.1:9000/");
    assert!(o.aws.is_some_and(|a| a.overridden));
    assert_eq!(o.addressing, Addressing::Path);
}

fn with_key(extra: &str) -> String {
    format!("{ORIGIN}[auth]\n[[auth.keys]]\naccess_key_id = \"k\"\nsecret_access_key = \"s\"\n{extra}\n")
}

fn auth_of(text: &str) -> Vec<AuthKey> {
    let c = parse(text).unwrap();
    let AuthConfig::SigV4 { keys, .. } = c.auth().unwrap() else {
        panic!()
    };
    keys.clone()
}

#[test]
fn key_scopes_and_limits() {
    let keys = auth_of(&with_key(
        "allow = [\"read:a/p/*\", \"purge:*\"]\nmax_requests_per_second = 50\nmax_bytes_per_second = \"10MiB\"\nburst_bytes = \"1MiB\"",
    ));
    let k = &keys[0];
    assert_eq!(k.allow.as_ref().unwrap().to_string(), "read:a/p/*, purge:*");
    assert_eq!(k.limits.requests, Some((50.0, 50.0)));
    assert_eq!(k.limits.bytes, Some((10.0 * 1048576.0, 1048576.0)));
    let plain = &auth_of(&with_key(""))[0];
    assert!(plain.allow.is_none());
    assert_eq!(plain.limits, KeyLimits::default());
    // A fractional rate still lets one request through at once.
    let slow = &auth_of(&with_key("max_requests_per_second = 0.5"))[0];
    assert_eq!(slow.limits.requests, Some((0.5, 1.0)));
}

#[test]
fn bad_scopes_and_limits_name_their_entry() {
    refused(
        &with_key("allow = [\"read:a\", \"fetch:a\"]"),
        "auth.keys[0].allow[1]",
        "not an action",
    );
    refused(
        &with_key("allow = [\"read:a/p\"]"),
        "auth.keys[0].allow[0]",
        "BUCKET/PREFIX*",
    );
    refused(
        &with_key("allow = [\"read\"]"),
        "auth.keys[0].allow[0]",
        "ACTION:RESOURCE",
    );
    refused(
        &with_key("allow = [\"read:*/x*\"]"),
        "auth.keys[0].allow[0]",
        "bucket name",
    );
    refused(
        &with_key("max_requests_per_second = 0"),
        "auth.keys[0].max_requests_per_second",
        "above zero",
    );
    refused(
        &with_key("max_requests_per_second = -3"),
        "auth.keys[0].max_requests_per_second",
        "above zero",
    );
    refused(
        &with_key("burst_requests = 10"),
        "auth.keys[0].burst_requests",
        "max_requests_per_second",
    );
    refused(
        &with_key("max_bytes_per_second = \"lots\""),
        "auth.keys[0].max_bytes_per_second",
        "size",
    );
    refused(
        &format!(
            "{}[[auth.keys]]\naccess_key_id = \"k\"\nsecret_access_key = \"t\"\n",
            with_key("")
        ),
        "auth.keys[1].access_key_id",
        "listed twice",
    );
    refused(
        &format!("{ORIGIN}[node]\naccess_log = \" \"\n[auth]\nmode = \"none\"\n"),
        "node.access_log",
        "empty",
    );
}

#[test]
fn eviction_policy_and_pins_are_checked() {
    use crate::blocks::policy::PolicyKind;
    use crate::blocks::BlockKey;
    let c = parse("[node]\n").unwrap();
    assert_eq!(c.cache.policy, PolicyKind::S3Fifo);
    assert_eq!(c.cache.pin_share_per_mille, 500);
    assert!(c.evicting().pinned.is_none());
    let c = parse(
        "[node]\n[cache]\npolicy = \"lru\"\npin_share = 0.25\n\
         [[rules]]\npattern = \"models/*.bin\"\npin = true\n\
         [[rules]]\npattern = \"models/**\"\n",
    )
    .unwrap();
    assert_eq!(c.cache.policy, PolicyKind::Lru);
    let e = c.evicting();
    assert_eq!((e.policy, e.pin_share_per_mille), (PolicyKind::Lru, 250));
    let pinned = e.pinned.expect("a rule pins");
    assert!(pinned(&BlockKey::new("models", "w.bin", "e", 1, 0)));
    // The first rule matching a key decides.
    assert!(!pinned(&BlockKey::new("models", "sub/w.bin", "e", 1, 0)));
    assert!(!pinned(&BlockKey::new("data", "w.bin", "e", 1, 0)));
    refused(
        "[node]\n[cache]\npolicy = \"LFU\"\n",
        "cache.policy",
        "\"s3-fifo\" and \"lru\"",
    );
    refused(
        "[node]\n[cache]\npin_share = 1.5\n",
        "cache.pin_share",
        "not a share",
    );
    refused(
        "[[rules]]\npattern = \"b/**\"\ncache = false\npin = true\n",
        "rules[0].cache",
        "pin do not apply",
    );
}

#[test]
fn the_origin_budget_is_off_unless_set_and_refuses_nonsense() {
    let c = parse(ORIGIN).unwrap();
    let t = &c.origin().unwrap().throttling;
    assert_eq!(t.limits, crate::store::budget::Limits::default());
    assert_eq!(t.deadline, Duration::from_secs(30));
    let set = parse(&ORIGIN.replace(
        "[origin]\n",
        "[origin]\nmax_requests_per_second = 2500\nmax_bytes_per_second = \"100MiB\"\n\
         max_concurrent_requests = 32\nthrottle_deadline = \"1m\"\n",
    ))
    .unwrap();
    let t = &set.origin().unwrap().throttling;
    assert_eq!(t.limits.requests_per_second, Some(2500.0));
    assert_eq!(t.limits.bytes_per_second, Some(100 << 20));
    assert_eq!(t.limits.concurrency, Some(32));
    assert_eq!(t.deadline, Duration::from_secs(60));
    for (line, key, needle) in [
        (
            "max_requests_per_second = 0",
            "origin.max_requests_per_second",
            "out of range",
        ),
        (
            "max_requests_per_second = -5.0",
            "origin.max_requests_per_second",
            "out of range",
        ),
        (
            "max_bytes_per_second = \"1KiB\"",
            "origin.max_bytes_per_second",
            "64KiB",
        ),
        (
            "max_concurrent_requests = 0",
            "origin.max_concurrent_requests",
            "out of range",
        ),
        (
            "throttle_deadline = \"0s\"",
            "origin.throttle_deadline",
            "out of range",
        ),
        (
            "throttle_deadline = \"2h\"",
            "origin.throttle_deadline",
            "at most an hour",
        ),
    ] {
        refused(
            &ORIGIN.replace("[origin]\n", &format!("[origin]\n{line}\n")),
            key,
            needle,
        );
    }
}

fn kube_env(pairs: &[(&str, &str)]) -> MapEnv {
    let mut e = env();
    for (k, v) in pairs {
        e.0.insert(k.to_string(), v.to_string());
    }
    e
}

#[test]
fn a_kubernetes_service_names_the_nodes() {
    let in_pod = kube_env(&[
        ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
        ("KUBERNETES_SERVICE_PORT", "443"),
        ("POD_IP", "10.1.2.3"),
    ]);
    let c = Config::parse(
        "[cluster]\nkubernetes = \"shoal/shoal-node\"\nkubernetes_port = \"s3\"\n[node]\nlisten = \"0.0.0.0:9100\"\n",
        "test.toml",
        &in_pod,
    )
    .unwrap();
    let Membership::Kubernetes(svc) = &c.cluster().unwrap().membership else {
        panic!("not kubernetes: {:?}", c.cluster().unwrap().membership);
    };
    assert_eq!(
        svc,
        &KubeService {
            namespace: "shoal".into(),
            service: "shoal-node".into(),
            port: Some("s3".into()),
            api: "https://10.96.0.1:443".into(),
            token_file: "/var/run/secrets/kubernetes.io/serviceaccount/token".into(),
            ca_file: Some("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt".into()),
        }
    );
    // The node is the endpoint of its pod's address on its listen port.
    assert_eq!(c.node().unwrap().id.as_deref(), Some("10.1.2.3:9100"));
    // A given id, or a listen address, is kept.
    let c = Config::parse(
        "[cluster]\nkubernetes = \"shoal/shoal-node\"\n[node]\nlisten = \"0.0.0.0:9100\"\nid = \"10.9.9.9:9100\"\n",
        "test.toml",
        &in_pod,
    )
    .unwrap();
    assert_eq!(c.node().unwrap().id.as_deref(), Some("10.9.9.9:9100"));
    // Outside a pod: the API and token as given, no CA unless named.
    let c = parse(
        "[cluster]\nkubernetes = \"ns-1/svc\"\nkubernetes_api = \"http://127.0.0.1:8001/\"\nkubernetes_token_file = \"/run/t\"\n",
    )
    .unwrap();
    let Membership::Kubernetes(svc) = &c.cluster().unwrap().membership else {
        panic!("not kubernetes");
    };
    assert_eq!(svc.api, "http://127.0.0.1:8001");
    assert_eq!(svc.token_file, std::path::PathBuf::from("/run/t"));
    assert_eq!(svc.ca_file, None);
    assert_eq!(svc.port, None);
}

#[test]
fn bad_kubernetes_keys_are_refused() {
    for name in [
        "shoal",
        "Shoal/node",
        "shoal/",
        "/node",
        "a/b/c",
        "shoal/-node",
        "ns/svc ",
    ] {
        refused(
            &format!("[cluster]\nkubernetes = {name:?}\n"),
            "cluster.kubernetes",
            "is not NAMESPACE/SERVICE",
        );
    }
    refused(
        "[cluster]\nkubernetes = \"a/b\"\nnodes = [\"x:1\"]\n",
        "cluster.kubernetes",
        "not several",
    );
    refused(
        "[cluster]\nkubernetes = \"a/b\"\ndns = \"x:1\"\n",
        "cluster.kubernetes",
        "not several",
    );
    refused(
        "[cluster]\nkubernetes = \"a/b\"\nrefresh = \"5s\"\n",
        "cluster.refresh",
        "only applies with dns",
    );
    refused(
        "[cluster]\nkubernetes = \"a/b\"\nkubernetes_api = \"ftp://x\"\n",
        "cluster.kubernetes_api",
        "is not an http(s) URL",
    );
    refused(
        "[cluster]\nnodes = [\"x:1\"]\nkubernetes_port = \"s3\"\n",
        "cluster.kubernetes_port",
        "only applies with cluster.kubernetes",
    );
    // A node that cannot tell which endpoint is itself.
    refused(
        "[cluster]\nkubernetes = \"a/b\"\n[node]\nlisten = \"0.0.0.0:9100\"\n",
        "node.id",
        "POD_IP",
    );
    let e = Config::parse(
        "[cluster]\nkubernetes = \"a/b\"\n[node]\nlisten = \"0.0.0.0:9100\"\n",
        "test.toml",
        &kube_env(&[("POD_IP", "not-an-ip")]),
    )
    .unwrap_err();
    assert_eq!(e.key, "node.id");
    assert!(e.message.contains("is not an IP address"), "{e}");
}
