//! Configs to set one key in, and their validation.

use shoal::config::raw::RawConfig;
use shoal::config::{Config, Env};

use super::schema::Shape;

/// A config file as sections of lines, to set one key in.
#[derive(Clone)]
pub struct Doc(Vec<(String, Vec<String>)>);

impl Doc {
    pub fn new(sections: &[(&str, &[&str])]) -> Doc {
        Doc(sections
            .iter()
            .map(|(h, lines)| (h.to_string(), lines.iter().map(|l| l.to_string()).collect()))
            .collect())
    }

    /// This file with `key = value` set in `section`.
    pub fn with(&self, section: &str, shape: Shape, key: &str, value: &str) -> Doc {
        let mut d = self.clone();
        if shape == Shape::NodeEntry {
            let entry = if key == "id" {
                format!("nodes = [{{ id = {value} }}]")
            } else {
                format!("nodes = [{{ id = \"127.0.0.1:9001\", {key} = {value} }}]")
            };
            match d.0.iter_mut().find(|(h, _)| h == "[cluster]") {
                Some((_, lines)) => {
                    lines.retain(|l| !l.starts_with("nodes ="));
                    lines.push(entry);
                }
                None => d.0.push(("[cluster]".into(), vec![entry])),
            }
            return d;
        }
        let header = match shape {
            Shape::Array => format!("[[{section}]]"),
            _ => format!("[{section}]"),
        };
        let line = format!("{key} = {value}");
        match d.0.iter_mut().find(|(h, _)| *h == header) {
            Some((_, lines)) => lines.push(line),
            None => d.0.push((header, vec![line])),
        }
        d
    }

    pub fn text(&self) -> String {
        let mut t = String::new();
        for (h, lines) in &self.0 {
            t += h;
            t.push('\n');
            for l in lines {
                t += l;
                t.push('\n');
            }
        }
        t
    }
}

/// No process environment: what a default is must not depend on the machine
/// the test runs on. A pod's address, for the Kubernetes context.
pub struct NoEnv;
impl Env for NoEnv {
    fn var(&self, name: &str) -> Option<String> {
        (name == "POD_IP").then(|| "10.0.0.7".into())
    }
    fn read_file(&self, _: &str) -> Option<String> {
        None
    }
}

pub fn parse(doc: &Doc) -> Result<Config, String> {
    Config::parse(&doc.text(), "reference.toml", &NoEnv).map_err(|e| e.to_string())
}

/// The configs a key is tried in, by name: a node's with every section, a
/// reader's, the origin on AWS's own endpoints, nodes found by DNS or from
/// Kubernetes, a mount with a disk tier, and one with nothing but an origin.
/// None of them sets a key the page gives a default as a value.
pub fn contexts() -> Vec<(&'static str, Doc)> {
    let origin: &[&str] = &[
        "endpoint = \"http://127.0.0.1:9000\"",
        "region = \"us-east-1\"",
    ];
    let node = |origin: &[&str], cluster: &[&str]| {
        Doc::new(&[
            ("[origin]", origin),
            (
                "[origin.credentials]",
                &["access_key_id = \"AK\"", "secret_access_key = \"SK\""],
            ),
            ("[cluster]", cluster),
            (
                "[cluster.credentials]",
                &["access_key_id = \"CK\"", "secret_access_key = \"CS\""],
            ),
            ("[cache]", &[]),
            ("[node]", &[]),
            ("[mount]", &[]),
            ("[auth]", &[]),
            (
                "[[auth.keys]]",
                &["access_key_id = \"K1\"", "secret_access_key = \"S1\""],
            ),
            (
                "[tls]",
                &[
                    "cert = \"/etc/shoal/cert.pem\"",
                    "key = \"/etc/shoal/key.pem\"",
                ],
            ),
            ("[metrics]", &[]),
            ("[gateway]", &[]),
            ("[[rules]]", &["pattern = \"**\""]),
        ])
    };
    let nodes: &[&str] = &["nodes = [{ id = \"127.0.0.1:9001\" }]"];
    let full = node(origin, nodes);
    let mut reader = full.clone();
    reader.0.retain(|(h, _)| {
        !["[node]", "[auth]", "[[auth.keys]]", "[tls]", "[gateway]"].contains(&h.as_str())
    });
    let mut disk = reader.clone();
    disk.0
        .iter_mut()
        .find(|(h, _)| h == "[mount]")
        .expect("a [mount]")
        .1 = vec!["disk_cache = \"/var/cache/shoal-mount\"".into()];
    vec![
        ("node", full),
        ("mount", reader),
        ("AWS", node(&["region = \"us-east-1\""], nodes)),
        ("dns", node(origin, &["dns = \"nodes.internal:9000\""])),
        (
            "kubernetes",
            node(origin, &["kubernetes = \"shoal/shoal-node\""]),
        ),
        ("disk", disk),
        ("bare", Doc::new(&[("[origin]", origin)])),
    ]
}

/// Whether the file parser takes `key = value` in `section`: its shape only.
pub fn raw_parses(section: &str, shape: Shape, key: &str, value: &str) -> Result<(), String> {
    let text = Doc::new(&[]).with(section, shape, key, value).text();
    toml::from_str::<RawConfig>(&text)
        .map(drop)
        .map_err(|e| e.to_string())
}
