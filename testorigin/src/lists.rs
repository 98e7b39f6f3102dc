//! Listings as S3 answers them: `max-keys=0` is an empty, untruncated page, and
//! with `encoding-type=url` every key and prefix in the answer is URL-encoded the
//! way S3 does it (form encoding: a space is `+`, `/` stays), so keys holding
//! control characters or `\r` survive XML.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use s3s::dto::*;
use s3s::S3Result;

use crate::store::{ListPage, Store, StoredObject};

/// What S3 leaves as it is in an encoded listing.
const KEEP: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/')
    .remove(b' ');

/// `s` as S3 encodes it in a listing with `encoding-type=url`.
pub fn s3_url_encode(s: &str) -> String {
    utf8_percent_encode(s, KEEP).to_string().replace(' ', "+")
}

/// Encodes listing strings when the request asked for it.
pub struct Encoder(bool);

impl Encoder {
    pub fn new(encoding: Option<&EncodingType>) -> Encoder {
        Encoder(encoding.is_some_and(|e| e.as_str() == EncodingType::URL))
    }
    pub fn s(&self, v: String) -> String {
        if self.0 {
            s3_url_encode(&v)
        } else {
            v
        }
    }
    pub fn opt(&self, v: Option<String>) -> Option<String> {
        v.map(|v| self.s(v))
    }
}

/// The page's objects and common prefixes as S3 listing entries.
pub fn entries(page: &ListPage, enc: &Encoder) -> (Vec<Object>, Vec<CommonPrefix>) {
    let contents = page
        .objects
        .iter()
        .map(|(key, obj)| listed(enc.s(key.clone()), obj))
        .collect();
    let prefixes = page
        .common_prefixes
        .iter()
        .map(|p| CommonPrefix {
            prefix: Some(enc.s(p.clone())),
        })
        .collect();
    (contents, prefixes)
}

fn listed(key: String, obj: &StoredObject) -> Object {
    Object {
        key: Some(key),
        size: Some(obj.data.len() as i64),
        e_tag: Some(ETag::Strong(obj.etag.clone())),
        last_modified: Some(Timestamp::from(obj.last_modified)),
        storage_class: Some(ObjectStorageClass::from(
            obj.attrs
                .storage_class
                .clone()
                .unwrap_or_else(|| ObjectStorageClass::STANDARD.to_owned()),
        )),
        ..Default::default()
    }
}

/// One page of `prefix` after `after`; `max_keys` 0 is an empty page that is not
/// truncated (S3's answer, which mountpoint-s3's bucket check relies on).
pub fn page(
    store: &Store,
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
    after: Option<&str>,
    max_keys: usize,
) -> S3Result<ListPage> {
    let page = store
        .list(bucket, prefix, delimiter, after, max_keys)
        .map_err(crate::errors::missing)?;
    if max_keys == 0 {
        return Ok(ListPage::default());
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_as_s3_does() {
        assert_eq!(s3_url_encode("a b.txt"), "a+b.txt");
        assert_eq!(s3_url_encode("a+b.txt"), "a%2Bb.txt");
        assert_eq!(s3_url_encode("100%.csv"), "100%25.csv");
        assert_eq!(s3_url_encode("한/x"), "%ED%95%9C/x");
        assert_eq!(s3_url_encode("\r\u{1}"), "%0D%01");
    }
}
