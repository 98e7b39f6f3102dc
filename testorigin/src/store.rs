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

/// What a PUT stores beside the bytes, and S3 gives back on every GET and HEAD.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectAttrs {
    pub content_type: Option<String>,
    pub cache_control: Option<String>,
    pub content_disposition: Option<String>,
    pub content_encoding: Option<String>,
    pub content_language: Option<String>,
    pub expires: Option<SystemTime>,
    /// `x-amz-meta-*`, names lower-cased.
    pub metadata: BTreeMap<String, String>,
    /// Absent for STANDARD, as S3 leaves it out.
    pub storage_class: Option<String>,
    /// An archived object (GLACIER, DEEP_ARCHIVE) restored for reading.
    pub restored: bool,
    /// Base64 MD5 of the SSE-C key the object was written with.
    pub sse_customer_key_md5: Option<String>,
}

/// One stored object version.
#[derive(Clone, Debug)]
pub struct StoredObject {
    pub data: Bytes,
    /// Hex MD5 of the data (the ETag without quotes), as S3 gives for single-part PUTs.
    pub etag: String,
    pub last_modified: SystemTime,
    pub attrs: ObjectAttrs,
    /// The sizes of its parts, for an object a multipart upload made.
    pub parts: Vec<u64>,
}

impl StoredObject {
    /// The bytes of part `n` (from 1): a whole object is its own part 1.
    pub fn part(&self, n: i32) -> Option<std::ops::Range<u64>> {
        let len = self.data.len() as u64;
        if self.parts.is_empty() {
            return (n == 1).then_some(0..len);
        }
        let i = usize::try_from(n).ok()?.checked_sub(1)?;
        let start: u64 = self.parts.get(..i)?.iter().sum();
        Some(start..start + *self.parts.get(i)?)
    }

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
            attrs: ObjectAttrs::default(),
            parts: Vec::new(),
        }
    }
}

#[derive(Default)]
pub struct Bucket {
    pub objects: BTreeMap<String, StoredObject>,
    pub created: Option<SystemTime>,
}

/// A multipart upload in progress.
struct Upload {
    bucket: String,
    key: String,
    attrs: ObjectAttrs,
    parts: BTreeMap<i32, Bytes>,
}

/// Why a multipart call was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum UploadError {
    NoSuchUpload,
    InvalidPart(i32),
    InvalidPartOrder,
    Missing(Missing),
}

/// All buckets of the origin.
#[derive(Default)]
pub struct Store {
    buckets: RwLock<BTreeMap<String, Bucket>>,
    uploads: std::sync::Mutex<std::collections::HashMap<String, Upload>>,
    next_upload: std::sync::atomic::AtomicU64,
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
        self.put_with(bucket, key, data, ObjectAttrs::default())
    }

    /// [`Self::put`] with the headers a PUT stores.
    pub fn put_with(
        &self,
        bucket: &str,
        key: &str,
        data: Bytes,
        attrs: ObjectAttrs,
    ) -> Option<String> {
        let mut obj = StoredObject::new(data);
        obj.attrs = attrs;
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

    pub fn create_upload(
        &self,
        bucket: &str,
        key: &str,
        attrs: ObjectAttrs,
    ) -> Result<String, Missing> {
        if !self.bucket_exists(bucket) {
            return Err(Missing::Bucket);
        }
        let n = self
            .next_upload
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("upload-{n}");
        self.uploads.lock().unwrap().insert(
            id.clone(),
            Upload {
                bucket: bucket.to_owned(),
                key: key.to_owned(),
                attrs,
                parts: BTreeMap::new(),
            },
        );
        Ok(id)
    }

    /// Stores one part, returning its ETag (hex MD5, as S3 does).
    pub fn upload_part(&self, id: &str, number: i32, data: Bytes) -> Result<String, UploadError> {
        let mut uploads = self.uploads.lock().unwrap();
        let u = uploads.get_mut(id).ok_or(UploadError::NoSuchUpload)?;
        if !(1..=10_000).contains(&number) {
            return Err(UploadError::InvalidPart(number));
        }
        let etag = hex::encode(Md5::digest(&data));
        u.parts.insert(number, data);
        Ok(etag)
    }

    /// Joins the listed parts (ascending, each with its ETag) into the object.
    /// The ETag is S3's: MD5 of the parts' MD5s, then `-N`.
    pub fn complete_upload(
        &self,
        id: &str,
        listed: &[(i32, String)],
    ) -> Result<(String, String, String), UploadError> {
        let mut uploads = self.uploads.lock().unwrap();
        let u = uploads.get(id).ok_or(UploadError::NoSuchUpload)?;
        let mut data = bytes::BytesMut::new();
        let mut digests = Vec::new();
        let mut sizes = Vec::new();
        let mut last = 0;
        for (n, etag) in listed {
            if *n <= last {
                return Err(UploadError::InvalidPartOrder);
            }
            last = *n;
            let part = u.parts.get(n).ok_or(UploadError::InvalidPart(*n))?;
            let digest = Md5::digest(part);
            if hex::encode(digest) != etag.trim_matches('"') {
                return Err(UploadError::InvalidPart(*n));
            }
            digests.extend_from_slice(&digest);
            sizes.push(part.len() as u64);
            data.extend_from_slice(part);
        }
        let etag = format!("{}-{}", hex::encode(Md5::digest(&digests)), listed.len());
        let mut obj = StoredObject::new(data.freeze());
        obj.etag = etag.clone();
        obj.attrs = u.attrs.clone();
        obj.parts = sizes;
        let (bucket, key) = (u.bucket.clone(), u.key.clone());
        {
            let mut b = self.buckets.write().unwrap();
            b.get_mut(&bucket)
                .ok_or(UploadError::Missing(Missing::Bucket))?
                .objects
                .insert(key.clone(), obj);
        }
        uploads.remove(id);
        Ok((bucket, key, etag))
    }

    pub fn abort_upload(&self, id: &str) -> Result<(), UploadError> {
        self.uploads
            .lock()
            .unwrap()
            .remove(id)
            .map(drop)
            .ok_or(UploadError::NoSuchUpload)
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
