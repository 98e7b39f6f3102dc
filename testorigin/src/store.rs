//! The origin's objects: an in-memory bucket map.
//!
//! Memory, not a directory tree, because S3 keys are not paths: `a//b`, a leading
//! `/`, and a key that is both an object and a prefix (`dir` and `dir/x`) must all
//! exist at once, byte-exact, as they do on real S3.

use std::collections::BTreeMap;
use std::sync::RwLock;
use std::time::SystemTime;

use bytes::Bytes;
use md5::{Digest, Md5};

/// One stored object version.
#[derive(Clone, Debug)]
pub struct StoredObject {
    pub data: Bytes,
    /// Hex MD5 of the data (the ETag without quotes), as S3 gives for single-part PUTs.
    pub etag: String,
    pub last_modified: SystemTime,
    pub content_type: Option<String>,
}

impl StoredObject {
    pub fn new(data: Bytes) -> Self {
        let etag = hex::encode(Md5::digest(&data));
        // S3 times have one-second resolution in HTTP dates; keep ours the same so a
        // HEAD and a listing agree exactly.
        let now = SystemTime::now();
        let secs = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let last_modified = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        Self {
            data,
            etag,
            last_modified,
            content_type: None,
        }
    }
}

#[derive(Default)]
pub struct Bucket {
    pub objects: BTreeMap<String, StoredObject>,
    pub created: Option<SystemTime>,
}

/// All buckets of the origin.
#[derive(Default)]
pub struct Store {
    buckets: RwLock<BTreeMap<String, Bucket>>,
}

impl Store {
    pub fn create_bucket(&self, name: &str) -> bool {
        let mut b = self.buckets.write().unwrap();
        if b.contains_key(name) {
            return false;
        }
        b.insert(
            name.to_owned(),
            Bucket {
                objects: BTreeMap::new(),
                created: Some(SystemTime::now()),
            },
        );
        true
    }

    pub fn bucket_exists(&self, name: &str) -> bool {
        self.buckets.read().unwrap().contains_key(name)
    }

    pub fn bucket_names(&self) -> Vec<(String, Option<SystemTime>)> {
        self.buckets
            .read()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.created))
            .collect()
    }

    /// Stores `data` at `key`, returning the new ETag, or `None` if the bucket is missing.
    pub fn put(&self, bucket: &str, key: &str, data: Bytes) -> Option<String> {
        let obj = StoredObject::new(data);
        let etag = obj.etag.clone();
        let mut b = self.buckets.write().unwrap();
        b.get_mut(bucket)?.objects.insert(key.to_owned(), obj);
        Some(etag)
    }

    pub fn get(&self, bucket: &str, key: &str) -> Result<StoredObject, Missing> {
        let b = self.buckets.read().unwrap();
        let bucket = b.get(bucket).ok_or(Missing::Bucket)?;
        bucket.objects.get(key).cloned().ok_or(Missing::Key)
    }

    pub fn delete(&self, bucket: &str, key: &str) -> Result<(), Missing> {
        let mut b = self.buckets.write().unwrap();
        let bucket = b.get_mut(bucket).ok_or(Missing::Bucket)?;
        bucket.objects.remove(key);
        Ok(())
    }

    /// One ListObjectsV2 page: keys after `after` that start with `prefix`, rolled up
    /// at the first `delimiter` after the prefix, at most `max_keys` entries.
    pub fn list(
        &self,
        bucket: &str,
        prefix: &str,
        delimiter: Option<&str>,
        after: Option<&str>,
        max_keys: usize,
    ) -> Result<ListPage, Missing> {
        let b = self.buckets.read().unwrap();
        let bucket = b.get(bucket).ok_or(Missing::Bucket)?;
        let mut page = ListPage::default();
        let start = match after {
            Some(a) if a >= prefix => std::ops::Bound::Excluded(a.to_owned()),
            _ => std::ops::Bound::Included(prefix.to_owned()),
        };
        let mut last_prefix: Option<String> = None;
        for (key, obj) in bucket.objects.range((start, std::ops::Bound::Unbounded)) {
            if !key.starts_with(prefix) {
                break;
            }
            let rest = &key[prefix.len()..];
            let rolled = delimiter.filter(|d| !d.is_empty()).and_then(|d| {
                rest.find(d)
                    .map(|i| format!("{prefix}{}", &rest[..i + d.len()]))
            });
            if let Some(cp) = rolled {
                if last_prefix.as_deref() == Some(cp.as_str()) {
                    continue;
                }
                // A continuation token inside a rolled-up prefix must not repeat it.
                if after.is_some_and(|a| a.starts_with(&cp)) {
                    continue;
                }
                if page.count() == max_keys {
                    page.truncated = true;
                    break;
                }
                last_prefix = Some(cp.clone());
                page.next_after = Some(cp.clone());
                page.common_prefixes.push(cp);
            } else {
                if page.count() == max_keys {
                    page.truncated = true;
                    break;
                }
                page.next_after = Some(key.clone());
                page.objects.push((key.clone(), obj.clone()));
            }
        }
        // The token after a common prefix skips everything under it.
        if let Some(last) = page.next_after.as_mut() {
            if page.common_prefixes.last() == Some(last) {
                last.push(char::MAX);
            }
        }
        Ok(page)
    }
}

#[derive(Default)]
pub struct ListPage {
    pub objects: Vec<(String, StoredObject)>,
    pub common_prefixes: Vec<String>,
    pub truncated: bool,
    pub next_after: Option<String>,
}

impl ListPage {
    fn count(&self) -> usize {
        self.objects.len() + self.common_prefixes.len()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    Bucket,
    Key,
}
