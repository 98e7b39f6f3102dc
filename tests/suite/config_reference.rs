//! The book's configuration reference (`docs/src/configuration.md`) against the
//! config types, so that the page cannot drift from them:
//! - every key of every section is on the page, and nothing else is: the keys
//!   are the fields of the raw structs (`shoal::config::raw`), read from their
//!   own `Deserialize` impls;
//! - each key's type on the page is the type the file parser takes, and only
//!   that: a value of that type parses, one of another type is refused;
//! - each choice the page lists for a key validates, and a choice it does not
//!   list is refused;
//! - each default the page writes as a value is what a config that leaves the
//!   key out gets: the validated config with the key set to it is the same
//!   (`Debug`, field by field) as the config without it.

use std::collections::{BTreeMap, BTreeSet};

use serde::de::{self, Deserialize, Deserializer, Visitor};
use shoal::config::raw::{
    RawAuth, RawAuthKey, RawCache, RawCluster, RawConfig, RawCredentials, RawGateway, RawMetrics,
    RawMount, RawNode, RawNodeFull, RawOrigin, RawRule, RawTls,
};
use shoal::config::{Config, Env};

const PAGE: &str = "docs/src/configuration.md";

/// The field names a derived `Deserialize` asks for: it names them all when it
/// asks for a struct, which is all this deserializer answers before it stops.
fn fields_of<'de, T: Deserialize<'de>>() -> Vec<&'static str> {
    struct Fields<'a>(&'a mut Vec<&'static str>);
    impl<'de> Deserializer<'de> for Fields<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("only a struct is read"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            self.0.extend_from_slice(fields);
            Err(de::Error::custom("fields read"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map enum identifier ignored_any
        }
    }
    let mut out = Vec::new();
    let _ = T::deserialize(Fields(&mut out));
    assert!(!out.is_empty(), "no fields read from {}", std::any::type_name::<T>());
    out
}

/// How a section is written in a file.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// `[a.b]`
    Table,
    /// `[[a.b]]`
    Array,
    /// An inline table in `[cluster] nodes = [...]`.
    NodeEntry,
}

/// Every section of the file: its name on the page, how it is written, its keys.
fn sections() -> Vec<(&'static str, Shape, Vec<&'static str>)> {
    use Shape::*;
    vec![
        ("origin", Table, fields_of::<RawOrigin>()),
        ("origin.credentials", Table, fields_of::<RawCredentials>()),
        ("cluster", Table, fields_of::<RawCluster>()),
        ("cluster.nodes", NodeEntry, fields_of::<RawNodeFull>()),
        ("cluster.credentials", Table, fields_of::<RawCredentials>()),
        ("cache", Table, fields_of::<RawCache>()),
        ("node", Table, fields_of::<RawNode>()),
        ("mount", Table, fields_of::<RawMount>()),
        ("auth", Table, fields_of::<RawAuth>()),
        ("auth.keys", Array, fields_of::<RawAuthKey>()),
        ("tls", Table, fields_of::<RawTls>()),
        ("metrics", Table, fields_of::<RawMetrics>()),
        ("gateway", Table, fields_of::<RawGateway>()),
        ("rules", Array, fields_of::<RawRule>()),
    ]
}

/// One row of the page's tables.
#[derive(Debug)]
struct Row {
    section: String,
    key: String,
    ty: String,
    default: String,
    line: usize,
}

/// The text of each `` `code` `` span in `s`.
fn code_spans(s: &str) -> Vec<&str> {
    s.split('`').skip(1).step_by(2).collect()
}

/// The page's tables, each under the heading that names its section by its
/// first code span (`` `[origin]` ``, `` `[[auth.keys]]` ``, `` `cluster.nodes` ``).
fn read_page(text: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut section: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        if line.starts_with('#') {
            section = code_spans(line)
                .first()
                .map(|s| s.trim_matches(|c| c == '[' || c == ']').to_owned());
            continue;
        }
        let Some(sec) = &section else { continue };
        if !line.starts_with('|') {
            continue;
        }
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').map(str::trim).collect();
        if cells[0] == "key" || cells[0].starts_with("---") {
            continue;
        }
        assert_eq!(cells.len(), 4, "{PAGE}:{}: a row has 4 cells: {line}", i + 1);
        let key = code_spans(cells[0]);
        assert_eq!(key.len(), 1, "{PAGE}:{}: the key is one code span: {line}", i + 1);
        rows.push(Row {
            section: sec.clone(),
            key: key[0].to_owned(),
            ty: cells[1].to_owned(),
            default: cells[2].to_owned(),
            line: i + 1,
        });
    }
    rows
}

fn page() -> Vec<Row> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{PAGE}: {e}"));
    read_page(&text)
}

/// A config file as sections of lines, to set one key in.
#[derive(Clone)]
struct Doc(Vec<(String, Vec<String>)>);

impl Doc {
    fn new(sections: &[(&str, &[&str])]) -> Doc {
        Doc(sections
            .iter()
            .map(|(h, lines)| (h.to_string(), lines.iter().map(|l| l.to_string()).collect()))
            .collect())
    }

    /// This file with `key = value` set in `section`.
    fn with(&self, section: &str, shape: Shape, key: &str, value: &str) -> Doc {
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

    fn text(&self) -> String {
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
struct NoEnv;
impl Env for NoEnv {
    fn var(&self, name: &str) -> Option<String> {
        (name == "POD_IP").then(|| "10.0.0.7".into())
    }
    fn read_file(&self, _: &str) -> Option<String> {
        None
    }
}

fn parse(doc: &Doc) -> Result<Config, String> {
    Config::parse(&doc.text(), "reference.toml", &NoEnv).map_err(|e| e.to_string())
}

/// The configs a key is tried in, by name: a node's with every section, a
/// reader's, the origin on AWS's own endpoints, nodes found by DNS or from
/// Kubernetes, a mount with a disk tier, and one with nothing but an origin.
/// None of them sets a key the page gives a default as a value.
fn contexts() -> Vec<(&'static str, Doc)> {
    let origin: &[&str] = &["endpoint = \"http://127.0.0.1:9000\"", "region = \"us-east-1\""];
    let node = |origin: &[&str], cluster: &[&str]| {
        Doc::new(&[
            ("[origin]", origin),
            ("[origin.credentials]", &["access_key_id = \"AK\"", "secret_access_key = \"SK\""]),
            ("[cluster]", cluster),
            ("[cluster.credentials]", &["access_key_id = \"CK\"", "secret_access_key = \"CS\""]),
            ("[cache]", &[]),
            ("[node]", &[]),
            ("[mount]", &[]),
            ("[auth]", &[]),
            ("[[auth.keys]]", &["access_key_id = \"K1\"", "secret_access_key = \"S1\""]),
            ("[tls]", &["cert = \"/etc/shoal/cert.pem\"", "key = \"/etc/shoal/key.pem\""]),
            ("[metrics]", &[]),
            ("[gateway]", &[]),
            ("[[rules]]", &["pattern = \"**\""]),
        ])
    };
    let nodes: &[&str] = &["nodes = [{ id = \"127.0.0.1:9001\" }]"];
    let full = node(origin, nodes);
    let mut reader = full.clone();
    reader.0.retain(|(h, _)| !["[node]", "[auth]", "[[auth.keys]]", "[tls]", "[gateway]"].contains(&h.as_str()));
    let mut disk = reader.clone();
    disk.0.iter_mut().find(|(h, _)| h == "[mount]").expect("a [mount]").1 =
        vec!["disk_cache = \"/var/cache/shoal-mount\"".into()];
    vec![
        ("node", full),
        ("mount", reader),
        ("AWS", node(&["region = \"us-east-1\""], nodes)),
        ("dns", node(origin, &["dns = \"nodes.internal:9000\""])),
        ("kubernetes", node(origin, &["kubernetes = \"shoal/shoal-node\""])),
        ("disk", disk),
        ("bare", Doc::new(&[("[origin]", origin)])),
    ]
}

/// Values of a type on the page that the file parser must take, and values it
/// must refuse.
fn probes(ty: &str) -> Option<(Vec<String>, Vec<&'static str>)> {
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    Some(match ty {
        "string" => (s(&["\"x\""]), vec!["true", "1"]),
        "bool" => (s(&["true", "false"]), vec!["\"x\"", "1"]),
        "integer" => (s(&["7"]), vec!["\"x\"", "0.5"]),
        "float" => (s(&["0.5", "2.0"]), vec!["\"x\"", "true"]),
        "size" => (s(&["\"1MiB\"", "1048576"]), vec!["true", "\"5s\""]),
        "duration" => (s(&["\"5s\""]), vec!["true", "\"1MiB\""]),
        "list of strings" => (s(&["[\"x\"]"]), vec!["\"x\"", "[1]"]),
        "table" => (s(&["{}"]), vec!["\"x\""]),
        "list of tables" => (s(&["[{}]"]), vec!["\"x\"", "{}"]),
        "list of nodes" => (s(&["[\"h:1\", { id = \"h:2\" }]"]), vec!["\"x\"", "[1]"]),
        // One of the values in code: a string the file takes as any other.
        t if t.starts_with('`') => (code_spans(t).iter().map(|c| c.to_string()).collect(), vec!["true", "1"]),
        _ => return None,
    })
}

fn raw_parses(section: &str, shape: Shape, key: &str, value: &str) -> Result<(), String> {
    let text = Doc::new(&[]).with(section, shape, key, value).text();
    toml::from_str::<RawConfig>(&text)
        .map(drop)
        .map_err(|e| e.to_string())
}

fn shape_of(section: &str) -> Shape {
    sections()
        .into_iter()
        .find(|(s, _, _)| *s == section)
        .map(|(_, shape, _)| shape)
        .unwrap_or(Shape::Table)
}

#[test]
fn every_key_of_every_section_is_on_the_page_and_nothing_else() {
    let rows = page();
    let mut problems = Vec::new();
    let mut on_page: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for r in &rows {
        if !on_page.entry(&r.section).or_default().insert(&r.key) {
            problems.push(format!("{PAGE}:{}: {}.{} is listed twice", r.line, r.section, r.key));
        }
    }
    let known = sections();
    for (section, _, fields) in &known {
        let page_keys = on_page.get(section).cloned().unwrap_or_default();
        for f in fields {
            if !page_keys.contains(f) {
                problems.push(format!("{section}.{f} is a key of the config but not on {PAGE}"));
            }
        }
        for k in page_keys {
            if !fields.contains(&k) {
                problems.push(format!("{section}.{k} is on {PAGE} but the config has no such key"));
            }
        }
    }
    for s in on_page.keys() {
        if !known.iter().any(|(k, _, _)| k == s) {
            problems.push(format!("{PAGE} has a section {s:?} the config does not"));
        }
    }
    // Each section of the file, and each key that holds a section, has its table.
    for f in fields_of::<RawConfig>() {
        if !on_page.contains_key(f) {
            problems.push(format!("section [{f}] of the config has no table on {PAGE}"));
        }
    }
    for r in &rows {
        if ["table", "list of tables", "list of nodes"].contains(&r.ty.as_str()) {
            let sub = format!("{}.{}", r.section, r.key);
            if !on_page.contains_key(sub.as_str()) {
                problems.push(format!("{PAGE}:{}: {sub} holds a section, which has no table", r.line));
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn each_key_takes_the_type_the_page_gives_it() {
    let mut problems = Vec::new();
    for r in page() {
        let shape = shape_of(&r.section);
        let Some((good, bad)) = probes(&r.ty) else {
            problems.push(format!("{PAGE}:{}: {}.{}: unknown type {:?}", r.line, r.section, r.key, r.ty));
            continue;
        };
        for v in &good {
            if let Err(e) = raw_parses(&r.section, shape, &r.key, v) {
                problems.push(format!("{PAGE}:{}: {}.{} is a {}, but {v} is refused: {e}", r.line, r.section, r.key, r.ty));
            }
        }
        for v in bad {
            if raw_parses(&r.section, shape, &r.key, v).is_ok() {
                problems.push(format!("{PAGE}:{}: {}.{} is a {}, but {v} is taken too", r.line, r.section, r.key, r.ty));
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn each_listed_choice_validates_and_no_other_does() {
    let ctx = contexts();
    let mut problems = Vec::new();
    let mut checked = 0;
    for r in page().into_iter().filter(|r| r.ty.starts_with('`')) {
        let shape = shape_of(&r.section);
        for choice in code_spans(&r.ty) {
            let valid_in: Vec<_> = ctx
                .iter()
                .filter(|(_, d)| parse(&d.with(&r.section, shape, &r.key, choice)).is_ok())
                .collect();
            if valid_in.is_empty() {
                problems.push(format!("{PAGE}:{}: {}.{} = {choice} is refused in every config", r.line, r.section, r.key));
            }
            // The same configs refuse a value the page does not list.
            for (name, d) in valid_in {
                if parse(&d.with(&r.section, shape, &r.key, "\"no-such-choice\"")).is_ok() {
                    problems.push(format!("{PAGE}:{}: {}.{} takes a value the page does not list ({name})", r.line, r.section, r.key));
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 8, "only {checked} choices read from {PAGE}");
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// The defaults the page writes as values: `` `V` `` or `` `V` (context) ``,
/// comma-separated. Anything else in the cell is a default in words.
fn literal_defaults(cell: &str) -> Option<Vec<(String, Option<String>)>> {
    let mut out = Vec::new();
    for item in cell.split(", ") {
        let item = item.trim();
        let rest = item.strip_prefix('`')?;
        let (value, after) = rest.split_once('`')?;
        let context = match after.trim() {
            "" => None,
            t => Some(t.strip_prefix('(')?.strip_suffix(')')?.to_owned()),
        };
        // A value in TOML, not a name (`AWS_CA_BUNDLE`) or a command.
        toml::from_str::<toml::Table>(&format!("v = {value}")).ok()?;
        out.push((value.to_owned(), context));
    }
    (!out.is_empty()).then_some(out)
}

#[test]
fn each_default_the_page_writes_is_the_default() {
    let ctx = contexts();
    for (name, d) in &ctx {
        parse(d).unwrap_or_else(|e| panic!("context {name} does not parse: {e}\n{}", d.text()));
    }
    let mut problems = Vec::new();
    let (mut checked, mut in_words) = (0, Vec::new());
    for r in page() {
        let Some(defaults) = literal_defaults(&r.default) else {
            in_words.push(format!("{}.{}", r.section, r.key));
            continue;
        };
        let shape = shape_of(&r.section);
        for (value, context) in defaults {
            let tried: Vec<_> = ctx
                .iter()
                .filter(|(n, _)| context.as_deref().is_none_or(|c| c == *n))
                .collect();
            if tried.is_empty() {
                problems.push(format!("{PAGE}:{}: {}.{}: no config named {context:?}", r.line, r.section, r.key));
                continue;
            }
            // The first config in which the key may be set at all.
            let found = tried.iter().find_map(|(n, d)| {
                parse(&d.with(&r.section, shape, &r.key, &value))
                    .ok()
                    .map(|with| (n, format!("{:?}", parse(d).expect("parsed above")), format!("{with:?}")))
            });
            match found {
                None => problems.push(format!(
                    "{PAGE}:{}: {}.{} = {value} is refused in every config it was tried in",
                    r.line, r.section, r.key
                )),
                Some((n, without, with)) if without != with => problems.push(format!(
                    "{PAGE}:{}: {}.{}: the page says the default is {value}, but a config ({n}) that sets it differs from one that leaves it out",
                    r.line, r.section, r.key
                )),
                Some(_) => checked += 1,
            }
        }
    }
    eprintln!("{checked} defaults checked; in words: {}", in_words.join(", "));
    assert!(checked >= 60, "only {checked} defaults read from {PAGE}");
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}
