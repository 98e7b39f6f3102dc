//! S3's XML bodies, read with `quick-xml`'s serde support.

use serde::Deserialize;

#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "PascalCase", default)]
pub struct ErrorBody {
    pub code: Option<String>,
    pub message: Option<String>,
}

pub fn parse_error(body: &[u8]) -> ErrorBody {
    std::str::from_utf8(body)
        .ok()
        .and_then(|s| quick_xml::de::from_str::<ErrorBody>(s).ok())
        .unwrap_or_default()
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "PascalCase")]
pub struct ListBucketResult {
    #[serde(default)]
    pub contents: Vec<Contents>,
    #[serde(default)]
    pub common_prefixes: Vec<CommonPrefix>,
    #[serde(default)]
    pub is_truncated: bool,
    pub next_continuation_token: Option<String>,
    /// `url` when keys and prefixes are URL-encoded (asked for with `encoding-type`).
    pub encoding_type: Option<String>,
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "PascalCase")]
pub struct Contents {
    pub key: String,
    pub size: u64,
    #[serde(rename = "ETag")]
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    pub storage_class: Option<String>,
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "PascalCase")]
pub struct CommonPrefix {
    pub prefix: String,
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "PascalCase")]
pub struct InitiateMultipartUploadResult {
    pub upload_id: String,
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "PascalCase")]
pub struct CompleteMultipartUploadResult {
    #[serde(rename = "ETag")]
    pub etag: String,
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "PascalCase")]
pub struct ListAllMyBucketsResult {
    #[serde(default)]
    pub buckets: Buckets,
}

#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "PascalCase")]
pub struct Buckets {
    #[serde(default)]
    pub bucket: Vec<BucketEntry>,
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "PascalCase")]
pub struct BucketEntry {
    pub name: String,
    pub creation_date: Option<String>,
}

/// A small XML answer as `T`.
pub fn parse_as<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    let s = std::str::from_utf8(body).map_err(|e| format!("answer is not UTF-8: {e}"))?;
    quick_xml::de::from_str(s).map_err(|e| format!("answer XML: {e}"))
}

pub fn parse_list(body: &[u8]) -> Result<ListBucketResult, String> {
    let s = std::str::from_utf8(body).map_err(|e| format!("listing is not UTF-8: {e}"))?;
    quick_xml::de::from_str(s).map_err(|e| format!("listing XML: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_listing() {
        let x = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix></Prefix>
<KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>
<Contents><Key>a &amp; b</Key><LastModified>2024-01-02T03:04:05.000Z</LastModified><ETag>"abc"</ETag><Size>12</Size><StorageClass>STANDARD</StorageClass></Contents>
<CommonPrefixes><Prefix>dir/</Prefix></CommonPrefixes>
<NextContinuationToken>tok</NextContinuationToken></ListBucketResult>"#;
        let l = parse_list(x.as_bytes()).unwrap();
        assert_eq!(l.contents[0].key, "a & b");
        assert_eq!(l.contents[0].size, 12);
        assert_eq!(l.contents[0].etag.as_deref(), Some("\"abc\""));
        assert_eq!(l.common_prefixes[0].prefix, "dir/");
        assert!(l.is_truncated);
        assert_eq!(l.next_continuation_token.as_deref(), Some("tok"));
        assert!(parse_list(b"<ListBucketResult><Contents><Key>x</Key></Contents>").is_err());
    }

    #[test]
    fn parses_bucket_list() {
        let body = br#"<?xml version="1.0" encoding="UTF-8"?>
<ListAllMyBucketsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Owner><ID>abc</ID><DisplayName>me</DisplayName></Owner>
  <Buckets>
    <Bucket><Name>one</Name><CreationDate>2026-01-02T03:04:05.000Z</CreationDate></Bucket>
    <Bucket><Name>two</Name></Bucket>
  </Buckets>
</ListAllMyBucketsResult>"#;
        let r: ListAllMyBucketsResult = parse_as(body).unwrap();
        let names: Vec<&str> = r.buckets.bucket.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["one", "two"]);
        assert!(r.buckets.bucket[1].creation_date.is_none());
        let empty: ListAllMyBucketsResult =
            parse_as(b"<ListAllMyBucketsResult><Buckets></Buckets></ListAllMyBucketsResult>")
                .unwrap();
        assert!(empty.buckets.bucket.is_empty());
    }

    #[test]
    fn parses_error() {
        let e = parse_error(
            b"<Error><Code>NoSuchKey</Code><Message>gone</Message><Key>k</Key></Error>",
        );
        assert_eq!(e.code.as_deref(), Some("NoSuchKey"));
        assert_eq!(e.message.as_deref(), Some("gone"));
        assert!(parse_error(b"not xml").code.is_none());
    }
}
