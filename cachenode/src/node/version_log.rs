//! The object versions a node knows, kept beside its disk tier, so that a node
//! started again on the same disk knows what its block files are versions of.
//!
//! Without it a restarted node held the blocks but not their object's size and
//! dates, and answered a runner-up's `only-if-cached` ask for them 504 (it must
//! not ask the origin for a version then) until a reader made it learn the
//! version again: every block it held was fetched again by its new owner.
//!
//! One JSON line per version learned or forgotten, appended (a crash loses at
//! most the lines not yet written; a torn last line is skipped); the file is
//! rewritten from what is known at start and at stop, and when it has grown
//! past a bound.

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use shoal::store::ObjectMeta;

/// A version read back: its object, and how long ago it was last confirmed.
pub struct Restored {
    pub bucket: String,
    pub key: String,
    pub meta: ObjectMeta,
    pub age: Duration,
}

pub struct VersionLog {
    path: PathBuf,
    /// Whether appends go to the file: opened for each one and closed again,
    /// so the node holds no file of its tier open for writing between them
    /// (a tier's filesystem can then be remounted read-only under it).
    writable: Mutex<bool>,
    /// Lines appended since the last rewrite.
    appended: AtomicUsize,
}

/// Lines appended past which the log is rewritten from what is known.
const REWRITE_AFTER: usize = 400_000;

fn now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

fn encode(bucket: &str, key: &str, m: &ObjectMeta, checked: Duration) -> Value {
    let modified = m
        .last_modified
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| json!([d.as_secs(), d.subsec_nanos()]));
    json!({
        "b": bucket, "k": key, "e": m.etag, "s": m.size, "m": modified,
        "t": m.content_type, "h": m.headers, "at": checked.as_secs_f64(),
    })
}

fn decode(v: &Value) -> Option<(String, String, ObjectMeta, f64)> {
    let s = |f: &str| v[f].as_str().map(str::to_owned);
    let modified = match &v["m"] {
        Value::Array(a) if a.len() == 2 => {
            Some(UNIX_EPOCH + Duration::new(a[0].as_u64()?, u32::try_from(a[1].as_u64()?).ok()?))
        }
        _ => None,
    };
    let headers = v["h"]
        .as_array()?
        .iter()
        .map(|p| Some((p[0].as_str()?.to_owned(), p[1].as_str()?.to_owned())))
        .collect::<Option<Vec<_>>>()?;
    let meta = ObjectMeta {
        size: v["s"].as_u64()?,
        etag: s("e")?,
        last_modified: modified,
        content_type: s("t"),
        headers,
    };
    Some((s("b")?, s("k")?, meta, v["at"].as_f64()?))
}

impl VersionLog {
    /// Opens (creating) the log in `data_dir` and reads back the versions in it
    /// confirmed less than `max_age` ago; rewrites it with only those.
    pub fn open(
        data_dir: &Path,
        max_age: Duration,
    ) -> std::io::Result<(VersionLog, Vec<Restored>)> {
        let path = data_dir.join("versions.log");
        let mut known: HashMap<(String, String), (ObjectMeta, f64)> = HashMap::new();
        if let Ok(f) = fs::File::open(&path) {
            for line in std::io::BufReader::new(f).lines() {
                let Ok(line) = line else { break };
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if let Some(p) = v["gone_prefix"].as_array() {
                    if let [Value::String(b), Value::String(pre)] = p.as_slice() {
                        known.retain(|(kb, kk), _| !(kb == b && kk.starts_with(pre.as_str())));
                    }
                } else if let Some((b, k, meta, at)) = decode(&v) {
                    known.insert((b, k), (meta, at));
                }
            }
        }
        let now = now().as_secs_f64();
        let restored: Vec<Restored> = known
            .into_iter()
            .filter_map(|((bucket, key), (meta, at))| {
                let age = Duration::try_from_secs_f64((now - at).max(0.0)).ok()?;
                (age < max_age).then_some(Restored {
                    bucket,
                    key,
                    meta,
                    age,
                })
            })
            .collect();
        let log = VersionLog {
            path,
            writable: Mutex::new(false),
            appended: AtomicUsize::new(0),
        };
        log.rewrite(
            restored
                .iter()
                .map(|r| (r.bucket.as_str(), r.key.as_str(), &r.meta, r.age)),
        )?;
        Ok((log, restored))
    }

    /// Notes a version learned (or confirmed) now.
    pub fn learned(&self, bucket: &str, key: &str, meta: &ObjectMeta) {
        self.append(&encode(bucket, key, meta, now()));
    }

    /// Notes that every version under `prefix` is forgotten (a key is its
    /// own prefix, and the versions of longer keys learned again later).
    pub fn forgot(&self, bucket: &str, prefix: &str) {
        self.append(&json!({ "gone_prefix": [bucket, prefix] }));
    }

    /// Whether the log has grown enough to be rewritten.
    pub fn grown(&self) -> bool {
        self.appended.load(Relaxed) > REWRITE_AFTER
    }

    fn append(&self, v: &Value) {
        self.appended.fetch_add(1, Relaxed);
        let mut writable = self.writable.lock().unwrap();
        if *writable {
            let wrote = fs::OpenOptions::new()
                .append(true)
                .open(&self.path)
                .and_then(|mut f| writeln!(f, "{v}"));
            if wrote.is_err() {
                // A full or failing disk: the versions are learned again.
                *writable = false;
            }
        }
    }

    /// Replaces the log with `known` (version, age): the versions that matter,
    /// and nothing forgotten.
    pub fn rewrite<'a>(
        &self,
        known: impl Iterator<Item = (&'a str, &'a str, &'a ObjectMeta, Duration)>,
    ) -> std::io::Result<()> {
        let mut writable = self.writable.lock().unwrap();
        let tmp = self.path.with_extension("log.tmp");
        let mut out = std::io::BufWriter::new(fs::File::create(&tmp)?);
        let now = now();
        for (b, k, m, age) in known {
            writeln!(out, "{}", encode(b, k, m, now.saturating_sub(age)))?;
        }
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        fs::rename(&tmp, &self.path)?;
        *writable = true;
        self.appended.store(0, Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(etag: &str) -> ObjectMeta {
        ObjectMeta {
            size: 5 << 20,
            etag: etag.into(),
            last_modified: Some(UNIX_EPOCH + Duration::new(1_700_000_000, 5)),
            content_type: Some("text/plain".into()),
            headers: vec![("x-amz-meta-a".into(), "b".into())],
        }
    }

    #[test]
    fn versions_come_back_and_forgotten_ones_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let (log, none) = VersionLog::open(dir.path(), Duration::from_secs(60)).unwrap();
        assert!(none.is_empty());
        log.learned("bk", "a/1", &meta("e1"));
        log.learned("bk", "a/2", &meta("e2"));
        log.learned("bk", "b", &meta("e3"));
        log.forgot("bk", "a/2");
        drop(log);
        // A torn last line is skipped.
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("versions.log"))
            .unwrap();
        f.write_all(b"{\"b\":\"bk\",\"k\":\"c\",\"e\"").unwrap();
        let (_, mut back) = VersionLog::open(dir.path(), Duration::from_secs(60)).unwrap();
        back.sort_by(|a, b| a.key.cmp(&b.key));
        let keys: Vec<&str> = back.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(keys, ["a/1", "b"]);
        assert!(back[0].meta == meta("e1"));
        assert!(back[0].age < Duration::from_secs(5));
        // Past max_age nothing comes back.
        let (_, old) = VersionLog::open(dir.path(), Duration::ZERO).unwrap();
        assert!(old.is_empty());
    }
}
