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

/// A `ListObjectsV2` page, read event by event into the fields a listing
/// needs: a walk of a large tree reads tens of thousands of entries, and the
/// generic deserializer cost more per entry than everything else the client
/// does with it. Elements it does not know (`Owner`, `ChecksumAlgorithm`, ...)
/// are skipped with what they hold.
pub fn parse_list(body: &[u8]) -> Result<ListBucketResult, String> {
    std::str::from_utf8(body).map_err(|e| format!("listing is not UTF-8: {e}"))?;
    list_events(body).map_err(|e| format!("listing XML: {e}"))
}

/// Where a text being read goes.
#[derive(Clone, Copy, PartialEq)]
enum Field {
    Key,
    Size,
    ETag,
    LastModified,
    StorageClass,
    Prefix,
    IsTruncated,
    NextToken,
    EncodingType,
}

/// Which field an element is, by its parent (`Contents`, `CommonPrefixes` or
/// the root, at `depth` 1).
fn field(parent: &[u8], name: &[u8], depth: usize) -> Option<Field> {
    Some(match (depth, parent, name) {
        (1, _, b"IsTruncated") => Field::IsTruncated,
        (1, _, b"NextContinuationToken") => Field::NextToken,
        (1, _, b"EncodingType") => Field::EncodingType,
        (2, b"Contents", b"Key") => Field::Key,
        (2, b"Contents", b"Size") => Field::Size,
        (2, b"Contents", b"ETag") => Field::ETag,
        (2, b"Contents", b"LastModified") => Field::LastModified,
        (2, b"Contents", b"StorageClass") => Field::StorageClass,
        (2, b"CommonPrefixes", b"Prefix") => Field::Prefix,
        _ => return None,
    })
}

/// An entry being read.
#[derive(Default)]
struct Partial {
    key: Option<String>,
    size: Option<u64>,
    etag: Option<String>,
    last_modified: Option<String>,
    storage_class: Option<String>,
}

fn list_events(body: &[u8]) -> Result<ListBucketResult, String> {
    use quick_xml::events::Event;
    let mut r = quick_xml::Reader::from_reader(body);
    let mut out = ListBucketResult {
        contents: Vec::new(),
        common_prefixes: Vec::new(),
        is_truncated: false,
        next_continuation_token: None,
        encoding_type: None,
    };
    // Elements open now (0 before the root), the name of the one at depth 1,
    // and the field whose text is being read.
    let mut depth = 0usize;
    let mut parent: Vec<u8> = Vec::new();
    let mut reading: Option<Field> = None;
    let mut text = String::new();
    let mut entry = Partial::default();
    let mut prefix: Option<String> = None;
    let mut done = false;
    loop {
        let ev = r.read_event().map_err(|e| e.to_string())?;
        if done
            && !matches!(
                ev,
                Event::Eof | Event::Text(_) | Event::Comment(_) | Event::PI(_)
            )
        {
            return Err("content after the root element".into());
        }
        let empty = matches!(ev, Event::Empty(_));
        match ev {
            Event::Start(e) | Event::Empty(e) => {
                let name = e.local_name();
                let name = name.as_ref();
                if depth == 1 {
                    parent.clear();
                    parent.extend_from_slice(name);
                    match name {
                        b"Contents" => entry = Partial::default(),
                        b"CommonPrefixes" => prefix = None,
                        _ => {}
                    }
                }
                reading = field(&parent, name, depth);
                text.clear();
                if empty {
                    // `<Key/>`: the element and its (empty) text at once.
                    end_element(
                        &mut out,
                        &mut entry,
                        &mut prefix,
                        &parent,
                        depth + 1,
                        reading,
                        &text,
                    )?;
                    reading = None;
                    if depth == 0 {
                        done = true;
                    }
                } else {
                    depth += 1;
                }
            }
            Event::End(_) => {
                if depth == 0 {
                    return Err("an end tag outside the root".into());
                }
                end_element(
                    &mut out,
                    &mut entry,
                    &mut prefix,
                    &parent,
                    depth,
                    reading,
                    &text,
                )?;
                reading = None;
                depth -= 1;
                if depth == 0 {
                    done = true;
                }
            }
            Event::Text(t) if reading.is_some() => {
                text.push_str(&t.xml_content().map_err(|e| e.to_string())?);
            }
            Event::CData(t) if reading.is_some() => {
                text.push_str(&t.xml_content().map_err(|e| e.to_string())?);
            }
            Event::GeneralRef(g) => {
                let c = match g.resolve_char_ref().map_err(|e| e.to_string())? {
                    Some(c) => c,
                    None => {
                        let name = g.decode().map_err(|e| e.to_string())?;
                        let Some(s) = quick_xml::escape::resolve_predefined_entity(&name) else {
                            return Err(format!("unknown entity &{name};"));
                        };
                        if reading.is_some() {
                            text.push_str(s);
                        }
                        continue;
                    }
                };
                if reading.is_some() {
                    text.push(c);
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if !done {
        return Err(if depth == 0 {
            "no root element".into()
        } else {
            "the answer ends inside an element".into()
        });
    }
    Ok(out)
}

/// An element at `depth` (1: the root) ends: its text goes to `reading`'s
/// field, and a `Contents` or `CommonPrefixes` ending is an entry.
#[allow(clippy::too_many_arguments)]
fn end_element(
    out: &mut ListBucketResult,
    entry: &mut Partial,
    prefix: &mut Option<String>,
    parent: &[u8],
    depth: usize,
    reading: Option<Field>,
    text: &str,
) -> Result<(), String> {
    if let Some(f) = reading {
        let owned = || text.to_owned();
        match f {
            Field::Key => entry.key = Some(owned()),
            Field::Size => {
                let n = text
                    .trim()
                    .parse()
                    .map_err(|_| format!("Size {text:?} is not a number"))?;
                entry.size = Some(n);
            }
            Field::ETag => entry.etag = Some(owned()),
            Field::LastModified => entry.last_modified = Some(owned()),
            Field::StorageClass => entry.storage_class = Some(owned()),
            Field::Prefix => *prefix = Some(owned()),
            Field::IsTruncated => {
                out.is_truncated = match text.trim() {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    t => return Err(format!("IsTruncated {t:?} is not a boolean")),
                }
            }
            Field::NextToken => out.next_continuation_token = Some(owned()),
            Field::EncodingType => out.encoding_type = Some(owned()),
        }
        return Ok(());
    }
    // The element at depth 2 ends: one of the root's children.
    if depth == 2 {
        match parent {
            b"Contents" => {
                let e = std::mem::take(entry);
                let (Some(key), Some(size)) = (e.key, e.size) else {
                    return Err("a Contents without its Key or Size".into());
                };
                out.contents.push(Contents {
                    key,
                    size,
                    etag: e.etag,
                    last_modified: e.last_modified,
                    storage_class: e.storage_class,
                });
            }
            b"CommonPrefixes" => {
                let Some(p) = prefix.take() else {
                    return Err("a CommonPrefixes without its Prefix".into());
                };
                out.common_prefixes.push(CommonPrefix { prefix: p });
            }
            _ => {}
        }
    }
    Ok(())
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

    /// `(key, size, etag, last_modified, storage_class)` of each entry.
    type Row<'a> = (
        &'a str,
        u64,
        Option<&'a str>,
        Option<&'a str>,
        Option<&'a str>,
    );

    fn rows(l: &ListBucketResult) -> Vec<Row<'_>> {
        l.contents
            .iter()
            .map(|c| {
                (
                    c.key.as_str(),
                    c.size,
                    c.etag.as_deref(),
                    c.last_modified.as_deref(),
                    c.storage_class.as_deref(),
                )
            })
            .collect()
    }

    fn prefixes(l: &ListBucketResult) -> Vec<&str> {
        l.common_prefixes
            .iter()
            .map(|p| p.prefix.as_str())
            .collect()
    }

    #[test]
    fn a_listing_reads_exactly_what_the_page_holds() {
        // Escapes (predefined, decimal, hex), unicode keys, CDATA, elements
        // not read (Owner with children, ChecksumAlgorithm), a comment,
        // whitespace between elements, an entry with only Key and Size.
        let x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\n\
  <Name>b</Name><Prefix>d/</Prefix><KeyCount>4</KeyCount><MaxKeys>1000</MaxKeys>\n\
  <Delimiter>/</Delimiter><EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>\n\
  <Contents>\n    <Key>d/a &amp; b &lt;c&gt; &quot;q&quot; &apos;s&apos;</Key>\n\
    <LastModified>2024-01-02T03:04:05.000Z</LastModified>\n\
    <ETag>&quot;abc&quot;</ETag><ChecksumAlgorithm>CRC32</ChecksumAlgorithm>\n\
    <Size>12</Size><Owner><ID>o</ID><DisplayName>me</DisplayName></Owner>\n\
    <StorageClass>GLACIER</StorageClass>\n  </Contents>\n\
  <!-- a comment -->\n\
  <Contents><Key>d/\u{1F980} ü 한 &#x41;&#66;</Key><Size> 0 </Size></Contents>\n\
  <Contents><Key><![CDATA[d/<raw> & more]]></Key><Size>18446744073709551615</Size><ETag></ETag></Contents>\n\
  <CommonPrefixes><Prefix>d/sub dir/</Prefix></CommonPrefixes>\n\
  <CommonPrefixes><Prefix>d/\u{00e9}t\u{00e9}/</Prefix></CommonPrefixes>\n\
</ListBucketResult>\n";
        let l = parse_list(x.as_bytes()).unwrap();
        assert_eq!(
            rows(&l),
            [
                (
                    "d/a & b <c> \"q\" 's'",
                    12,
                    Some("\"abc\""),
                    Some("2024-01-02T03:04:05.000Z"),
                    Some("GLACIER")
                ),
                ("d/\u{1F980} ü 한 AB", 0, None, None, None),
                ("d/<raw> & more", u64::MAX, Some(""), None, None),
            ]
        );
        assert_eq!(prefixes(&l), ["d/sub dir/", "d/été/"]);
        assert!(!l.is_truncated);
        assert_eq!(l.next_continuation_token, None);
        assert_eq!(l.encoding_type.as_deref(), Some("url"));
    }

    #[test]
    fn empty_pages_and_truncation_markers() {
        let l = parse_list(b"<ListBucketResult/>").unwrap();
        assert!(l.contents.is_empty() && l.common_prefixes.is_empty() && !l.is_truncated);
        let l = parse_list(
            b"<ListBucketResult><Name>b</Name><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated></ListBucketResult>",
        )
        .unwrap();
        assert!(l.contents.is_empty() && l.common_prefixes.is_empty() && !l.is_truncated);
        // A truncated page whose entries are all on the next one (S3 sends such
        // pages when keys under a prefix were deleted), and a token with escapes.
        let l = parse_list(
            b"<ListBucketResult><IsTruncated>true</IsTruncated><NextContinuationToken>1/a+b=&amp;c</NextContinuationToken></ListBucketResult>",
        )
        .unwrap();
        assert!(l.is_truncated && l.contents.is_empty());
        assert_eq!(l.next_continuation_token.as_deref(), Some("1/a+b=&c"));
        let l = parse_list(b"<r><IsTruncated>1</IsTruncated><NextContinuationToken/></r>").unwrap();
        assert!(l.is_truncated);
        assert_eq!(l.next_continuation_token.as_deref(), Some(""));
        // Markers inside an entry's unread children are not the page's.
        let l = parse_list(
            b"<r><Contents><Key>k</Key><Size>1</Size><Owner><IsTruncated>true</IsTruncated><Key>no</Key></Owner></Contents></r>",
        )
        .unwrap();
        assert!(!l.is_truncated);
        assert_eq!(rows(&l), [("k", 1, None, None, None)]);
    }

    #[test]
    fn a_damaged_listing_is_an_error_not_a_shorter_page() {
        for bad in [
            &b""[..],
            b"<ListBucketResult><Contents><Key>x</Key><Size>1</Size></Contents>",
            b"<ListBucketResult><Contents><Key>x</Key></Contents></ListBucketResult>",
            b"<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>",
            b"<ListBucketResult><Contents><Key>x</Key><Size>-1</Size></Contents></ListBucketResult>",
            b"<ListBucketResult><Contents><Key>x</Key><Size>1</Size></Content></ListBucketResult>",
            b"<ListBucketResult><CommonPrefixes></CommonPrefixes></ListBucketResult>",
            b"<ListBucketResult><IsTruncated>maybe</IsTruncated></ListBucketResult>",
            b"<ListBucketResult><Contents><Key>&bogus;</Key><Size>1</Size></Contents></ListBucketResult>",
            b"<ListBucketResult></ListBucketResult><Contents/>",
            b"<ListBucketResult><Contents><Key>\xff</Key><Size>1</Size></Contents></ListBucketResult>",
        ] {
            assert!(parse_list(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
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
