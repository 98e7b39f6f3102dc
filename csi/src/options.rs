//! A volume's mount options (the PersistentVolume's `mountOptions`, which reach
//! the plugin as the capability's mount flags): `shoal-mount`'s own long options
//! without their dashes, `key=value` or a bare `key`. Only those that shape how a
//! volume reads are taken, each value checked as `shoal-mount` would check it; an
//! unknown option is refused, never passed through or dropped.

use shoal::config::units::{Dur, Size};

use crate::error::CsiError;

/// How an option's value is read.
#[derive(Clone, Copy)]
enum Value {
    Flag,
    Duration,
    Size,
    Id,
    Mode,
    /// A whole number within bounds.
    Count(u64, u64),
    /// One of these words.
    Choice(&'static [&'static str]),
}

const OPTIONS: &[(&str, Value)] = &[
    ("metadata-ttl", Value::Duration),
    ("metadata", Value::Choice(&["cluster", "origin"])),
    ("uid", Value::Id),
    ("gid", Value::Id),
    ("file-mode", Value::Mode),
    ("dir-mode", Value::Mode),
    ("allow-other", Value::Flag),
    ("cache-size", Value::Size),
    ("disk-cache-size", Value::Size),
    ("read-window", Value::Count(1, 1024)),
    ("prefetch-files", Value::Count(0, 1 << 20)),
];

/// Accepted and dropped: the volume is read-only whatever it says.
const READ_ONLY: &[&str] = &["ro", "read-only"];

/// `flags` as `shoal-mount` arguments (`--key=value`, `--key`), sorted.
pub fn to_args(flags: &[String]) -> Result<Vec<String>, CsiError> {
    let mut args = Vec::new();
    for raw in flags {
        // One entry may hold several, comma-separated, as fstab's do.
        for f in raw.split(',') {
            let f = f.trim();
            if f.is_empty() {
                continue;
            }
            let f = f.trim_start_matches('-');
            let (key, value) = match f.find(['=', ' ']) {
                Some(i) => (&f[..i], Some(f[i + 1..].trim())),
                None => (f, None),
            };
            let key = key.replace('_', "-");
            if READ_ONLY.contains(&key.as_str()) {
                continue;
            }
            let Some((name, kind)) = OPTIONS.iter().find(|(n, _)| *n == key) else {
                let known: Vec<&str> = OPTIONS.iter().map(|(n, _)| *n).collect();
                return Err(CsiError::Invalid(format!(
                    "mount option {f:?} is not one shoal takes (known: {})",
                    known.join(", ")
                )));
            };
            args.push(check(name, *kind, value)?);
        }
    }
    args.sort();
    args.dedup();
    Ok(args)
}

fn check(name: &str, kind: Value, value: Option<&str>) -> Result<String, CsiError> {
    let bad = |why: String| CsiError::Invalid(format!("mount option {name}: {why}"));
    let v = match (kind, value) {
        (Value::Flag, None) => return Ok(format!("--{name}")),
        (Value::Flag, Some(v)) => return Err(bad(format!("takes no value (got {v:?})"))),
        (_, None) | (_, Some("")) => return Err(bad("needs a value (name=value)".into())),
        (_, Some(v)) => v,
    };
    match kind {
        Value::Duration => {
            Dur::parse(v).map_err(bad)?;
        }
        Value::Size => {
            Size::parse(v).map_err(bad)?;
        }
        Value::Id => {
            v.parse::<u32>()
                .map_err(|_| bad(format!("{v:?} is not a user or group id")))?;
        }
        Value::Mode => {
            u16::from_str_radix(v.trim_start_matches("0o"), 8)
                .ok()
                .filter(|m| *m <= 0o7777)
                .ok_or_else(|| bad(format!("{v:?} is not an octal mode like 0444")))?;
        }
        Value::Count(lo, hi) => {
            let n: u64 = v
                .parse()
                .map_err(|_| bad(format!("{v:?} is not a whole number")))?;
            if !(lo..=hi).contains(&n) {
                return Err(bad(format!("{n} is not within {lo} to {hi}")));
            }
        }
        Value::Choice(words) => {
            if !words.contains(&v) {
                return Err(bad(format!("{v:?} is not one of {}", words.join(", "))));
            }
        }
        Value::Flag => unreachable!("flags return above"),
    }
    Ok(format!("--{name}={v}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(f: &[&str]) -> Result<Vec<String>, CsiError> {
        to_args(&f.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn options_become_flags_and_unknown_or_bad_ones_are_refused() {
        assert_eq!(
            args(&[
                "metadata-ttl=30s",
                "uid=1000",
                "allow-other",
                "--cache-size 512MiB",
                "ro"
            ])
            .unwrap(),
            vec![
                "--allow-other",
                "--cache-size=512MiB",
                "--metadata-ttl=30s",
                "--uid=1000"
            ]
        );
        assert_eq!(
            args(&["read_window=16,prefetch-files=0,metadata=origin"]).unwrap(),
            vec![
                "--metadata=origin",
                "--prefetch-files=0",
                "--read-window=16"
            ]
        );
        for (bad, says) in [
            (&["no-such-thing"][..], "no-such-thing"),
            (&["metadata-ttl=soon"], "metadata-ttl"),
            (&["uid=root"], "uid"),
            (&["file-mode=999"], "file-mode"),
            (&["read-window=0"], "read-window"),
            (&["metadata=s3"], "metadata"),
            (&["allow-other=yes"], "allow-other"),
            (&["cache-size"], "cache-size"),
            (&["disk-cache=/etc"], "disk-cache"),
            (&["config=/etc/passwd"], "config"),
        ] {
            let e = args(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }
}
