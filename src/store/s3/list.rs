//! Listings: `ListObjectsV2` pages, the bucket list, and bucket checks.

use std::time::{Duration, SystemTime};

use http::Method;

use super::call::Call;
use super::encode::query_string;
use super::{xml, S3Client};
use crate::store::{unquote_etag, ListEntry, ListPage, ListRequest, StoreError};

impl S3Client {
    /// One page of `ListObjectsV2`.
    pub async fn list_objects_v2(&self, req: &ListRequest) -> Result<ListPage, StoreError> {
        // Keys come URL-encoded: a key holding a control character or `\r` would
        // otherwise not survive XML.
        let mut q: Vec<(&str, String)> =
            vec![("encoding-type", "url".into()), ("list-type", "2".into())];
        if let Some(t) = &req.continuation_token {
            q.push(("continuation-token", t.clone()));
        }
        if let Some(d) = &req.delimiter {
            q.push(("delimiter", d.clone()));
        }
        if let Some(m) = req.max_keys {
            q.push(("max-keys", m.to_string()));
        }
        q.push(("prefix", req.prefix.clone()));
        if let Some(s) = &req.start_after {
            q.push(("start-after", s.clone()));
        }
        let mut call = Call::new(Method::GET, &req.bucket, "").query(query_string(q));
        call.unsigned.extend(req.headers.iter().cloned());
        let (headers, body) = self.small_with_headers(call).await?;
        let age = headers
            .get(http::header::AGE)
            .and_then(|v| v.to_str().ok()?.trim().parse().ok())
            .map(Duration::from_secs);
        let parsed = xml::parse_list(&body).map_err(|m| self.protocol(m))?;
        let encoded = parsed.encoding_type.as_deref() == Some("url");
        let text = |s: String| if encoded { url_decode(s) } else { s };
        let objects = parsed
            .contents
            .into_iter()
            .map(|c| ListEntry {
                key: text(c.key),
                size: c.size,
                etag: c.etag.as_deref().map(unquote_etag).unwrap_or("").to_owned(),
                last_modified: c.last_modified.as_deref().and_then(parse_iso8601),
                storage_class: c.storage_class.filter(|s| s != "STANDARD"),
            })
            .collect();
        Ok(ListPage {
            objects,
            common_prefixes: parsed
                .common_prefixes
                .into_iter()
                .map(|p| text(p.prefix))
                .collect(),
            next_continuation_token: if parsed.is_truncated {
                parsed.next_continuation_token
            } else {
                None
            },
            age,
        })
    }

    /// The buckets the credentials may see, with their creation times.
    pub async fn list_buckets(&self) -> Result<Vec<(String, Option<SystemTime>)>, StoreError> {
        let body = self.small(Call::new(Method::GET, "", "")).await?;
        let parsed =
            xml::parse_as::<xml::ListAllMyBucketsResult>(&body).map_err(|m| self.protocol(m))?;
        Ok(parsed
            .buckets
            .bucket
            .into_iter()
            .map(|b| {
                let created = b.creation_date.as_deref().and_then(parse_iso8601);
                (b.name, created)
            })
            .collect())
    }

    /// `HEAD` of a bucket: does it exist and may we read it.
    pub async fn head_bucket(&self, bucket: &str) -> Result<(), StoreError> {
        self.execute(Call::new(Method::HEAD, bucket, ""))
            .await
            .map(drop)
    }
}

/// A key of a listing with `encoding-type=url`: S3 form-encodes it (a space is
/// `+`, a `+` is `%2B`). Most keys have nothing encoded and are kept as they are.
fn url_decode(s: String) -> String {
    if !s.bytes().any(|b| b == b'+' || b == b'%') {
        return s;
    }
    percent_encoding::percent_decode_str(&s.replace('+', " "))
        .decode_utf8_lossy()
        .into_owned()
}

/// `2024-01-02T03:04:05.000Z` as a time.
pub(crate) fn parse_iso8601(s: &str) -> Option<SystemTime> {
    let s = s.trim();
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>());
    let (y, mo, da) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let time = time.trim_end_matches('Z');
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|x| x.parse::<i64>());
    let (h, mi, se) = (t.next()?.ok()?, t.next()?.ok()?, t.next()?.ok()?);
    // Days from civil (Howard Hinnant's algorithm).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = if y2 >= 0 { y2 } else { y2 - 399 } / 400;
    let yoe = y2 - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + da - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    let secs = days * 86400 + h * 3600 + mi * 60 + se;
    // Milliseconds from the first three digits of the fraction, however many.
    let mut millis = 0u64;
    for c in frac.bytes().chain(std::iter::repeat(b'0')).take(3) {
        if !c.is_ascii_digit() {
            return None;
        }
        millis = millis * 10 + u64::from(c - b'0');
    }
    let secs = u64::try_from(secs).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_keys_decode_as_s3_encodes_them() {
        assert_eq!(
            url_decode("a+b%2Bc%25d%0D%01/%ED%95%9C".into()),
            "a b+c%d\r\u{1}/한"
        );
        assert_eq!(url_decode("plain/key".into()), "plain/key");
        assert_eq!(url_decode("ü/한".into()), "ü/한");
    }

    #[test]
    fn iso8601() {
        let t = parse_iso8601("2024-01-02T03:04:05.250Z").unwrap();
        assert_eq!(httpdate::fmt_http_date(t), "Tue, 02 Jan 2024 03:04:05 GMT");
        assert_eq!(
            t.duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .subsec_millis(),
            250
        );
        assert!(parse_iso8601("yesterday").is_none());
    }
}
