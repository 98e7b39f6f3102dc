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

mod configs;
mod page;
mod schema;

use std::collections::{BTreeMap, BTreeSet};

use configs::{contexts, parse, raw_parses};
use page::{code_spans, page, PAGE};
use schema::{fields_of, sections, shape_of};
use shoal::config::raw::RawConfig;

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
        t if t.starts_with('`') => (
            code_spans(t).iter().map(|c| c.to_string()).collect(),
            vec!["true", "1"],
        ),
        _ => return None,
    })
}

#[test]
fn every_key_of_every_section_is_on_the_page_and_nothing_else() {
    let rows = page();
    let mut problems = Vec::new();
    let mut on_page: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for r in &rows {
        if !on_page.entry(&r.section).or_default().insert(&r.key) {
            problems.push(format!(
                "{PAGE}:{}: {}.{} is listed twice",
                r.line, r.section, r.key
            ));
        }
    }
    let known = sections();
    for (section, _, fields) in &known {
        let page_keys = on_page.get(section).cloned().unwrap_or_default();
        for f in fields {
            if !page_keys.contains(f) {
                problems.push(format!(
                    "{section}.{f} is a key of the config but not on {PAGE}"
                ));
            }
        }
        for k in page_keys {
            if !fields.contains(&k) {
                problems.push(format!(
                    "{section}.{k} is on {PAGE} but the config has no such key"
                ));
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
            problems.push(format!(
                "section [{f}] of the config has no table on {PAGE}"
            ));
        }
    }
    for r in &rows {
        if ["table", "list of tables", "list of nodes"].contains(&r.ty.as_str()) {
            let sub = format!("{}.{}", r.section, r.key);
            if !on_page.contains_key(sub.as_str()) {
                problems.push(format!(
                    "{PAGE}:{}: {sub} holds a section, which has no table",
                    r.line
                ));
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
            problems.push(format!(
                "{PAGE}:{}: {}.{}: unknown type {:?}",
                r.line, r.section, r.key, r.ty
            ));
            continue;
        };
        for v in &good {
            if let Err(e) = raw_parses(&r.section, shape, &r.key, v) {
                problems.push(format!(
                    "{PAGE}:{}: {}.{} is a {}, but {v} is refused: {e}",
                    r.line, r.section, r.key, r.ty
                ));
            }
        }
        for v in bad {
            if raw_parses(&r.section, shape, &r.key, v).is_ok() {
                problems.push(format!(
                    "{PAGE}:{}: {}.{} is a {}, but {v} is taken too",
                    r.line, r.section, r.key, r.ty
                ));
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
                problems.push(format!(
                    "{PAGE}:{}: {}.{} = {choice} is refused in every config",
                    r.line, r.section, r.key
                ));
            }
            // The same configs refuse a value the page does not list.
            for (name, d) in valid_in {
                if parse(&d.with(&r.section, shape, &r.key, "\"no-such-choice\"")).is_ok() {
                    problems.push(format!(
                        "{PAGE}:{}: {}.{} takes a value the page does not list ({name})",
                        r.line, r.section, r.key
                    ));
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
                problems.push(format!(
                    "{PAGE}:{}: {}.{}: no config named {context:?}",
                    r.line, r.section, r.key
                ));
                continue;
            }
            // The first config in which the key may be set at all.
            let found = tried.iter().find_map(|(n, d)| {
                parse(&d.with(&r.section, shape, &r.key, &value))
                    .ok()
                    .map(|with| {
                        (
                            n,
                            format!("{:?}", parse(d).expect("parsed above")),
                            format!("{with:?}"),
                        )
                    })
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
    eprintln!(
        "{checked} defaults checked; in words: {}",
        in_words.join(", ")
    );
    assert!(checked >= 60, "only {checked} defaults read from {PAGE}");
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}
