//! The config a client reads through: the same TOML a mount reads (its
//! `[origin]`, `[cluster]`, `[cache]` and `[mount]` sections), named by a path,
//! or given as a dict of the same keys (which becomes that TOML, so it is
//! validated by the same code with the same messages).

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use shoal::config::{Config, ProcessEnv};

use crate::errors;

/// `source`: a path (str or os.PathLike) or a dict.
pub fn load(source: &Bound<'_, PyAny>) -> PyResult<Config> {
    if let Ok(d) = source.downcast::<PyDict>() {
        let table = table(d, "")?;
        let text = toml::to_string(&table)
            .map_err(|e| errors::bad_input(format!("shoal config dict: {e}")))?;
        return Config::parse(&text, "<config dict>", &ProcessEnv)
            .map_err(|e| errors::config_error(&e));
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
    Config::load(&path).map_err(|e| errors::config_error(&e))
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
