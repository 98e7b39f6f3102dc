//! [`MemoryStore`]: an object store in memory, answering as S3 does (ranges,
//! `If-Match`, `If-None-Match`, listings with a delimiter), for tests that need an
//! origin or a node without a network.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::RwLock;
use std::time::SystemTime;

use bytes::Bytes;

use super::{GetObject, GetResponse, ListEntry, ListPage, ListRequest, ObjectMeta, StoreError};

#[derive(Clone)]
struct Stored {
    data: Bytes,
    meta: ObjectMeta,
}

/// Buckets of objects in memory. Every request is counted.
pub struct MemoryStore {
    name: String,
    buckets: RwLock<BTreeMap<String, BTreeMap<String, Stored>>>,
    gets: AtomicU64,
    heads: AtomicU64,
    lists: AtomicU64,
    versions: AtomicU64,
}

impl MemoryStore {
    /// A store named `name` holding the empty `buckets`.
    pub fn new(name: &str, buckets: &[&str]) -> MemoryStore {
        MemoryStore {
            name: name.to_owned(),
            buckets: RwLock::new(
                buckets
                    .iter()
                    .map(|b| (b.to_string(), BTreeMap::new()))
                    .collect(),
            ),
            gets: AtomicU64::new(0),
            heads: AtomicU64::new(0),
            lists: AtomicU64::new(0),
            versions: AtomicU64::new(0),
        }
    }

    /// Stores a new version of `bucket/key`; returns its ETag (distinct per put).
    pub fn put(&self, bucket: &str, key: &str, data: impl Into<Bytes>) -> String {
        let data = data.into();
        let n = self.versions.fetch_add(1, Relaxed);
        let etag = format!("{:016x}{n:04x}", xxhash_rust::xxh3::xxh3_64(&data));
        let meta = ObjectMeta {
            size: data.len() as u64,
            etag: etag.clone(),
            last_modified: Some(SystemTime::UNIX_EPOCH),
            ..Default::default()
        };
        self.buckets
            .write()
            .unwrap()
            .get_mut(bucket)
            .unwrap_or_else(|| panic!("{} has no bucket {bucket}", self.name))
            .insert(key.to_owned(), Stored { data, meta });
        etag
    }

    pub fn delete(&self, bucket: &str, key: &str) {
        if let Some(b) = self.buckets.write().unwrap().get_mut(bucket) {
            b.remove(key);
        }
    }

    /// What is stored of `bucket/key` now (not counted as a request).
    pub fn meta(&self, bucket: &str, key: &str) -> Option<ObjectMeta> {
        self.find(bucket, key).ok().map(|o| o.meta)
    }

    /// Requests answered so far: (GETs, HEADs, LISTs).
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.gets.load(Relaxed),
            self.heads.load(Relaxed),
            self.lists.load(Relaxed),
        )
    }

    fn find(&self, bucket: &str, key: &str) -> Result<Stored, StoreError> {
        let buckets = self.buckets.read().unwrap();
        let b = buckets
            .get(bucket)
            .ok_or_else(|| StoreError::NoSuchBucket {
                bucket: bucket.into(),
            })?;
        b.get(key).cloned().ok_or_else(|| StoreError::NoSuchKey {
            bucket: bucket.into(),
            key: key.into(),
        })
    }

    /// The object `req` names, if its conditions hold.
    fn checked(&self, req: &GetObject) -> Result<Stored, StoreError> {
        let o = self.find(&req.bucket, &req.key)?;
        let (bucket, key) = (req.bucket.clone(), req.key.clone());
        if req.if_match.as_ref().is_some_and(|e| *e != o.meta.etag) {
            return Err(StoreError::PreconditionFailed { bucket, key });
        }
        if req
            .if_none_match
            .as_ref()
            .is_some_and(|e| *e == o.meta.etag)
        {
            return Err(StoreError::NotModified { bucket, key });
        }
        Ok(o)
    }
}

#[async_trait::async_trait]
impl super::ObjectStore for MemoryStore {
    fn name(&self) -> &str {
        &self.name
    }

    async fn head(&self, req: &GetObject) -> Result<ObjectMeta, StoreError> {
        self.heads.fetch_add(1, Relaxed);
        Ok(self.checked(req)?.meta)
    }

    async fn get_range(&self, req: &GetObject) -> Result<GetResponse, StoreError> {
        self.gets.fetch_add(1, Relaxed);
        let o = self.checked(req)?;
        let size = o.meta.size;
        let (start, end) = match req.range {
            None => (0, size),
            Some(r) => r.resolve(size).ok_or_else(|| StoreError::InvalidRange {
                bucket: req.bucket.clone(),
                key: req.key.clone(),
                range: r.header(),
            })?,
        };
        let body = o.data.slice(start as usize..end as usize);
        // In pieces, as a network delivers it: a fault can cut between them.
        const PIECE: usize = 64 << 10;
        let pieces: Vec<Result<Bytes, StoreError>> = (0..body.len().div_ceil(PIECE))
            .map(|i| Ok(body.slice(i * PIECE..((i + 1) * PIECE).min(body.len()))))
            .collect();
        Ok(GetResponse {
            meta: o.meta,
            start,
            end,
            body: Box::pin(futures_util::stream::iter(pieces)),
        })
    }

    async fn head_bucket(&self, bucket: &str) -> Result<(), StoreError> {
        self.heads.fetch_add(1, Relaxed);
        match self.buckets.read().unwrap().contains_key(bucket) {
            true => Ok(()),
            false => Err(StoreError::NoSuchBucket {
                bucket: bucket.to_owned(),
            }),
        }
    }

    async fn list_page(&self, req: &ListRequest) -> Result<ListPage, StoreError> {
        self.lists.fetch_add(1, Relaxed);
        let buckets = self.buckets.read().unwrap();
        let b = buckets
            .get(&req.bucket)
            .ok_or_else(|| StoreError::NoSuchBucket {
                bucket: req.bucket.clone(),
            })?;
        let after = req
            .continuation_token
            .clone()
            .or_else(|| req.start_after.clone())
            .unwrap_or_default();
        let max = req.max_keys.unwrap_or(1000) as usize;
        let mut page = ListPage::default();
        let mut last = None;
        for (key, o) in b.range(after.clone()..) {
            if key.as_str() <= after.as_str() || !key.starts_with(&req.prefix) {
                continue;
            }
            let rolled = req.delimiter.as_deref().and_then(|d| {
                let rest = &key[req.prefix.len()..];
                rest.find(d)
                    .map(|at| format!("{}{}", req.prefix, &rest[..at + d.len()]))
            });
            if rolled.is_some() && page.common_prefixes.last() == rolled.as_ref() {
                continue;
            }
            if page.objects.len() + page.common_prefixes.len() >= max {
                page.next_continuation_token = last;
                break;
            }
            match rolled {
                Some(p) => {
                    // The next page starts past every key rolled into this prefix.
                    last = Some(format!("{p}{}", char::MAX));
                    page.common_prefixes.push(p);
                }
                None => {
                    last = Some(key.clone());
                    page.objects.push(ListEntry {
                        key: key.clone(),
                        size: o.meta.size,
                        etag: o.meta.etag.clone(),
                        last_modified: o.meta.last_modified,
                        storage_class: None,
                    });
                }
            }
        }
        Ok(page)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{collect, ByteRange, ObjectStore};
    use super::*;

    #[tokio::test]
    async fn answers_as_s3_does() {
        let m = MemoryStore::new("mem", &["b"]);
        let e1 = m.put("b", "d/x", vec![7u8; 100_000]);
        m.put("b", "d/y/z", &b"zz"[..]);
        m.put("b", "e", &b"e"[..]);
        let req = GetObject::new("b", "d/x").range(ByteRange::span(10, 20));
        let r = m.get_range(&req).await.unwrap();
        assert_eq!((r.start, r.end), (10, 20));
        assert_eq!(collect(r).await.unwrap().len(), 10);
        let stale = GetObject::new("b", "d/x").if_match("nope");
        assert!(matches!(
            m.head(&stale).await,
            Err(StoreError::PreconditionFailed { .. })
        ));
        assert_eq!(m.head(&GetObject::new("b", "d/x")).await.unwrap().etag, e1);
        assert!(matches!(
            m.head(&GetObject::new("c", "k")).await,
            Err(StoreError::NoSuchBucket { .. })
        ));
        let mut list = ListRequest {
            bucket: "b".into(),
            prefix: "d/".into(),
            delimiter: Some("/".into()),
            max_keys: Some(1),
            ..Default::default()
        };
        let p1 = m.list_page(&list).await.unwrap();
        assert_eq!(p1.objects[0].key, "d/x");
        list.continuation_token = p1.next_continuation_token;
        let p2 = m.list_page(&list).await.unwrap();
        assert_eq!(p2.common_prefixes, ["d/y/"]);
        assert!(p2.next_continuation_token.is_none());
        assert_eq!(m.counts(), (1, 3, 2));
    }
}
