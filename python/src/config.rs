//! The config a client reads through: the same TOML a mount reads (its
//! `[origin]`, `[cluster]`, `[cache]` and `[mount]` sections), named by a path,
//! or given as a dict of the same keys (which becomes that TOML, so it is
//! validated by the same code with the same messages).
//!
//! A config that names no `[cache] ram_size` gets [`PROCESS_RAM`], not a
//! mount's default: a Python process is one of many on a host (a DataLoader's
//! workers, on each rank), and the nodes hold what is warm.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use shoal::config::{Config, ProcessEnv};

use crate::errors;

/// The RAM tier of a process whose config names none: 8 ranks of 8
/// DataLoader workers on one host hold 64 x 64 MiB = 4 GiB, where a mount's
/// 256 MiB each would be 16 GiB. It holds a sequential reader's window (at
/// most half of it: see `live`) and a batch's small objects many times over.
pub const PROCESS_RAM: u64 = 64 << 20;

/// `source`: a path (str or os.PathLike) or a dict.
pub fn load(source: &Bound<'_, PyAny>) -> PyResult<Config> {
    let (mut config, table) = parse(source)?;
    let sized = table
        .get("cache")
        .and_then(toml::Value::as_table)
        .is_some_and(|c| c.contains_key("ram_size"));
    if !sized {
        config.cache.ram_size = PROCESS_RAM;
    }
    Ok(config)
}

/// The config, and the table it was read from.
fn parse(source: &Bound<'_, PyAny>) -> PyResult<(Config, toml::Table)> {
    if let Ok(d) = source.downcast::<PyDict>() {
        let table = table(d, "")?;
        let text = toml::to_string(&table)
            .map_err(|e| errors::bad_input(format!("shoal config dict: {e}")))?;
        let config = Config::parse(&text, "<config dict>", &ProcessEnv)
            .map_err(|e| errors::config_error(&e))?;
        return Ok((config, table));
    }
    let path: std::path::PathBuf = source.extract().map_err(|_| {
        errors::bad_input(format!(
            "shoal config: a path to the mount's TOML file or a dict of its keys, not {}",
            source
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })?;
    let shown = path.display().to_string();
    if let Err(e) = std::fs::metadata(&path) {
        return Err(errors::config_missing(&shown, &e));
    }
    let config = Config::load(&path).map_err(|e| errors::config_error(&e))?;
    // Read again for what it names: it parsed as a config just now.
    let text = std::fs::read_to_string(&path).map_err(|e| errors::config_missing(&shown, &e))?;
    Ok((config, text.parse().unwrap_or_default()))
}

fn table(d: &Bound<'_, PyDict>, at: &str) -> PyResult<toml::Table> {
    let mut out = toml::Table::new();
    for (k, v) in d.iter() {
        let k: String = k.extract().map_err(|_| {
            errors::bad_input(format!("shoal config: a key under {at:?} is not a string"))
        })?;
        let here = if at.is_empty() {
            k.clone()
        } else {
            format!("{at}.{k}")
        };
        // None leaves a key unset, as a TOML file that does not name it.
        if v.is_none() {
            continue;
        }
        out.insert(k, value(&v, &here)?);
    }
    Ok(out)
}

fn value(v: &Bound<'_, PyAny>, at: &str) -> PyResult<toml::Value> {
    use toml::Value;
    if v.is_instance_of::<PyBool>() {
        return Ok(Value::Boolean(v.extract()?));
    }
    if v.is_instance_of::<PyInt>() {
        return Ok(Value::Integer(v.extract()?));
    }
    if v.is_instance_of::<PyFloat>() {
        return Ok(Value::Float(v.extract()?));
    }
    if v.is_instance_of::<PyString>() {
        return Ok(Value::String(v.extract()?));
    }
    if let Ok(d) = v.downcast::<PyDict>() {
        return Ok(Value::Table(table(d, at)?));
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let items: Vec<Bound<'_, PyAny>> = v.extract()?;
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            out.push(value(item, &format!("{at}[{i}]"))?);
        }
        return Ok(Value::Array(out));
    }
    if let Ok(p) = v.extract::<std::path::PathBuf>() {
        return Ok(Value::String(p.display().to_string()));
    }
    Err(errors::bad_input(format!(
        "shoal config: {at} is a {}, which TOML cannot hold",
        v.get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default()
    )))
}
