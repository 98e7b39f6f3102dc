//! Environment variables from a file (`--env-file`): how the variables a mount
//! reads its secrets from (a config's `*_env` keys, AWS's) reach a mount that
//! someone else's process manager starts, such as a systemd unit. A command
//! line (`ps`) or a unit's `Environment=` (`systemctl show`) any user may read;
//! this file only its owner.
//!
//! One `NAME=VALUE` per line, the value taken as it is to the end of the line;
//! empty lines and lines starting with `#` are skipped.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum EnvFileError {
    #[error("env file {0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error(
        "env file {0} may be read by other users (mode {1:o}): it holds secrets; chmod 600 it"
    )]
    Readable(PathBuf, u32),
    #[error("env file {0} belongs to uid {1}, neither to us nor to root")]
    Owner(PathBuf, u32),
    #[error("env file {0}, line {1}: not NAME=VALUE")]
    Line(PathBuf, usize),
    #[error(
        "variable {0:?} cannot go in an env file: a name without '=' or NUL, a value on one line"
    )]
    Unwritable(String),
}

/// Writes `vars` to `path`, readable and writable by its owner alone from the
/// first byte (a new file renamed over any old one).
pub fn write(path: &Path, vars: &[(String, String)]) -> Result<(), EnvFileError> {
    let mut text = String::new();
    for (k, v) in vars {
        if k.is_empty() || k.contains(['=', '\0', '\n']) || v.contains(['\0', '\n', '\r']) {
            return Err(EnvFileError::Unwritable(k.clone()));
        }
        text.push_str(&format!("{k}={v}\n"));
    }
    let err = |e| EnvFileError::Io(path.to_owned(), e);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".new");
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(err)?;
    f.write_all(text.as_bytes()).map_err(err)?;
    f.sync_all().map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

/// The variables in `path`, which only its owner (us, or root) may read.
pub fn read(path: &Path) -> Result<Vec<(String, String)>, EnvFileError> {
    let err = |e| EnvFileError::Io(path.to_owned(), e);
    let f = std::fs::File::open(path).map_err(err)?;
    let meta = f.metadata().map_err(err)?;
    if meta.mode() & 0o077 != 0 {
        return Err(EnvFileError::Readable(
            path.to_owned(),
            meta.mode() & 0o7777,
        ));
    }
    // SAFETY: a plain getter.
    let us = unsafe { libc::geteuid() };
    if meta.uid() != us && meta.uid() != 0 {
        return Err(EnvFileError::Owner(path.to_owned(), meta.uid()));
    }
    let text = std::io::read_to_string(f).map_err(err)?;
    let mut vars = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        match line.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => vars.push((k.trim().to_owned(), v.to_owned())),
            _ => return Err(EnvFileError::Line(path.to_owned(), i + 1)),
        }
    }
    Ok(vars)
}

/// Sets the variables in `path` in this process's environment (over any there).
/// Call it before any thread starts: the environment is not safe to change
/// while another thread may read it.
pub fn load(path: &Path) -> Result<(), EnvFileError> {
    for (k, v) in read(path)? {
        std::env::set_var(k, v);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn vars(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn what_is_written_is_read_back_and_only_its_owner_may_read_it() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("env");
        let v = vars(&[
            (
                "SHOAL_CLUSTER_SECRET",
                "s3cr=t with spaces 'and' \"quotes\" $x",
            ),
            ("EMPTY", ""),
        ]);
        write(&p, &v).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(read(&p).unwrap(), v);
        // Written again over an old one: still the owner's alone.
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        write(&p, &v[..1]).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(read(&p).unwrap(), v[..1]);
    }

    #[test]
    fn a_file_others_may_read_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("env");
        std::fs::write(&p, "A=b\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(read(&p), Err(EnvFileError::Readable(_, 0o644))));
    }

    #[test]
    fn comments_and_blank_lines_are_skipped_and_a_bad_line_is_named() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("env");
        std::fs::write(&p, "# a comment\n\nA=1\n  B = x=y\nnot a variable\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(read(&p), Err(EnvFileError::Line(_, 5))));
        std::fs::write(&p, "# a comment\n\nA=1\n  B = x=y\n").unwrap();
        assert_eq!(read(&p).unwrap(), vars(&[("A", "1"), ("B", " x=y")]));
    }

    #[test]
    fn a_value_on_two_lines_is_not_written() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("env");
        let e = write(&p, &vars(&[("A", "one\ntwo")])).unwrap_err();
        assert!(matches!(e, EnvFileError::Unwritable(_)));
        assert!(!p.exists());
    }
}
