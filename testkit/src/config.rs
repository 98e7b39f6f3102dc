//! Config files as the tests write them.

use shoal::config::{Config, ProcessEnv};
use shoal_testorigin::Origin;

use super::{NodeProcess, NODE_KEY, NODE_SECRET};

/// An `[origin]` section for `o`, with quick backoff.
pub fn origin_toml(o: &Origin) -> String {
    origin_section(&o.endpoint(), &o.options.access_key, &o.options.secret_key)
}

/// An `[origin]` section for any S3 endpoint, with quick backoff.
pub fn origin_section(endpoint: &str, access: &str, secret: &str) -> String {
    format!(
        "[origin]\nendpoint = \"{endpoint}\"\nretry_base = \"5ms\"\nretry_max = \"50ms\"\n\
         [origin.credentials]\naccess_key_id = \"{access}\"\nsecret_access_key = \"{secret}\"\n"
    )
}

/// A node's config for `o`: `[node]` on an ephemeral loopback port with
/// `node_extra` in it, `[auth]` taking [`NODE_KEY`] (allowed everything: tests
/// purge and write with it), then `rest` (more sections).
pub fn node_toml(o: &Origin, node_extra: &str, rest: &str) -> String {
    node_section(&origin_toml(o), node_extra, rest)
}

/// A node's config with `origin` as its `[origin]` section ([`node_toml`]).
pub fn node_section(origin: &str, node_extra: &str, rest: &str) -> String {
    format!(
        "{origin}[node]\nlisten = \"127.0.0.1:0\"\n{node_extra}\n[auth]\n[[auth.keys]]\n\
         access_key_id = \"{NODE_KEY}\"\nsecret_access_key = \"{NODE_SECRET}\"\nallow = [\"*:*\"]\n{rest}\n"
    )
}

/// `toml` (from [`node_toml`]) with authentication off: `auth.mode = "none"`.
pub fn without_auth(toml: &str) -> String {
    let keys = format!(
        "[auth]\n[[auth.keys]]\naccess_key_id = \"{NODE_KEY}\"\nsecret_access_key = \"{NODE_SECRET}\"\nallow = [\"*:*\"]\n"
    );
    assert!(toml.contains(&keys), "not a node_toml config:\n{toml}");
    toml.replace(&keys, "[auth]\nmode = \"none\"\n")
}

/// A `[cluster]` of `nodes` (`host:port`) signed with [`NODE_KEY`], with short node
/// deadlines and `extra` keys in it.
pub fn cluster_toml(nodes: &[&str], extra: &str) -> String {
    let ids: Vec<String> = nodes.iter().map(|n| format!("\"{n}\"")).collect();
    format!(
        "[cluster]\nnodes = [{}]\nconnect_timeout = \"300ms\"\nfirst_byte_timeout = \"1s\"\n\
         stall_timeout = \"1s\"\n{extra}\n[cluster.credentials]\naccess_key_id = \"{NODE_KEY}\"\n\
         secret_access_key = \"{NODE_SECRET}\"\n",
        ids.join(", ")
    )
}

/// A mount's config: the origin, a cluster of `nodes` if any, then `extra`.
pub fn mount_toml(o: &Origin, nodes: &[&NodeProcess], extra: &str) -> String {
    let mut t = origin_toml(o);
    if !nodes.is_empty() {
        let ids: Vec<&str> = nodes.iter().map(|n| n.addr.as_str()).collect();
        t.push_str(&cluster_toml(&ids, ""));
    }
    t.push_str(extra);
    t
}

/// `toml` as a validated config (panics with the text on an error).
pub fn parse(toml: &str) -> Config {
    Config::parse(toml, "test.toml", &ProcessEnv).unwrap_or_else(|e| panic!("{e}\n{toml}"))
}
