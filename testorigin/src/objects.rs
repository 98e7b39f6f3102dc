//! GET, HEAD and PUT of objects, answered as S3 answers them: conditional headers
//! in RFC 7232's order, ranges, the headers a PUT stored, and the `response-*`
//! overrides of a GET.

use std::ops::Range as Span;
use std::time::SystemTime;

use s3s::dto::*;
use s3s::{s3_error, S3Result};

use crate::store::StoredObject;

/// The conditions of a GET or HEAD.
pub struct Conditions<'a> {
    pub if_match: Option<&'a ETagCondition>,
    pub if_none_match: Option<&'a ETagCondition>,
    pub if_modified_since: Option<&'a Timestamp>,
    pub if_unmodified_since: Option<&'a Timestamp>,
}

fn matches(c: &ETagCondition, etag: &str) -> bool {
    match c {
        ETagCondition::Any => true,
        ETagCondition::ETag(t) => t.value() == etag,
    }
}

pub(crate) fn time(t: &Timestamp) -> SystemTime {
    SystemTime::from(time::OffsetDateTime::from(t.clone()))
}

impl Conditions<'_> {
    /// S3's (and RFC 7232's) order: `If-Match`, else `If-Unmodified-Since`, may
    /// fail the request (412); then `If-None-Match`, else `If-Modified-Since`, may
    /// make it a 304.
    pub fn check(&self, obj: &StoredObject) -> S3Result<()> {
        let failed = match (self.if_match, self.if_unmodified_since) {
            (Some(c), _) => !matches(c, &obj.etag),
            (None, Some(t)) => obj.last_modified > time(t),
            (None, None) => false,
        };
        if failed {
            return Err(s3_error!(
                PreconditionFailed,
                "At least one of the pre-conditions you specified did not hold"
            ));
        }
        let unmodified = match (self.if_none_match, self.if_modified_since) {
            (Some(c), _) => matches(c, &obj.etag),
            (None, Some(t)) => obj.last_modified <= time(t),
            (None, None) => false,
        };
        if unmodified {
            // As S3 sends it: the validators and the caching headers a 200
            // would carry.
            let mut e = s3_error!(NotModified);
            let mut h = http::HeaderMap::new();
            let mut put = |name: http::HeaderName, value: String| {
                if let Ok(v) = http::HeaderValue::from_str(&value) {
                    h.insert(name, v);
                }
            };
            put(http::header::ETAG, format!("\"{}\"", obj.etag));
            put(
                http::header::LAST_MODIFIED,
                httpdate::fmt_http_date(obj.last_modified),
            );
            if let Some(c) = &obj.attrs.cache_control {
                put(http::header::CACHE_CONTROL, c.clone());
            }
            if let Some(t) = obj.attrs.expires {
                put(http::header::EXPIRES, httpdate::fmt_http_date(t));
            }
            e.set_headers(h);
            return Err(e);
        }
        Ok(())
    }
}

/// The bytes a GET or HEAD selects: part `part_number`, else `range`; none for
/// the whole object.
pub fn span(
    obj: &StoredObject,
    part_number: Option<i32>,
    range: Option<Range>,
) -> S3Result<Option<Span<u64>>> {
    let len = obj.data.len() as u64;
    if let Some(n) = part_number {
        return match obj.part(n) {
            Some(p) if p.start < p.end => Ok(Some(p)),
            _ => {
                let mut e = s3s::S3Error::with_message(
                    s3s::S3ErrorCode::Custom("InvalidPartNumber".into()),
                    "The requested partnumber is not satisfiable",
                );
                e.set_status_code(http::StatusCode::RANGE_NOT_SATISFIABLE);
                Err(e)
            }
        };
    }
    match range {
        None => Ok(None),
        Some(r) => match r.check(len) {
            Ok(s) if s.start < s.end => Ok(Some(s)),
            _ => Err(s3_error!(
                InvalidRange,
                "The requested range is not satisfiable"
            )),
        },
    }
}

pub fn content_range(s: &Span<u64>, len: u64) -> String {
    format!("bytes {}-{}/{len}", s.start, s.end - 1)
}

/// What a PUT (or a multipart upload's start) `input` stores beside the bytes.
macro_rules! attrs_of {
    ($input:expr) => {{
        let i = &$input;
        $crate::store::ObjectAttrs {
            content_type: i.content_type.clone(),
            cache_control: i.cache_control.clone(),
            content_disposition: i.content_disposition.clone(),
            content_encoding: i.content_encoding.clone(),
            content_language: i.content_language.clone(),
            expires: i.expires.as_ref().map($crate::objects::time),
            metadata: i
                .metadata
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v))
                .collect(),
            storage_class: i
                .storage_class
                .as_ref()
                .map(|c| c.as_str().to_owned())
                .filter(|c| c != StorageClass::STANDARD),
            restored: false,
            sse_customer_key_md5: i.sse_customer_key_md5.clone(),
        }
    }};
}

/// Whether `obj` may be read as asked: an SSE-C object only with its key, an
/// archived one (GET only) only once restored.
pub fn readable(obj: &StoredObject, sse_key_md5: Option<&str>, get: bool) -> S3Result<()> {
    match (&obj.attrs.sse_customer_key_md5, sse_key_md5) {
        (Some(_), None) => {
            return Err(s3_error!(
                InvalidRequest,
                "The object was stored using a form of Server Side Encryption. The correct parameters must be provided to retrieve the object."
            ))
        }
        (Some(want), Some(got)) if want != got => {
            return Err(s3_error!(
                AccessDenied,
                "The calculated MD5 hash of the key did not match the hash that was provided."
            ))
        }
        _ => {}
    }
    let archived = matches!(
        obj.attrs.storage_class.as_deref(),
        Some("GLACIER" | "DEEP_ARCHIVE")
    );
    if get && archived && !obj.attrs.restored {
        return Err(s3_error!(
            InvalidObjectState,
            "The operation is not valid for the object's storage class"
        ));
    }
    Ok(())
}

/// `x-amz-restore` for a restored archived object.
pub fn restore_header(obj: &StoredObject) -> Option<String> {
    obj.attrs.restored.then(|| {
        "ongoing-request=\"false\", expiry-date=\"Fri, 01 Jan 2100 00:00:00 GMT\"".to_owned()
    })
}
pub(crate) use attrs_of;

/// The `response-*` parameters of a GET, which replace stored headers.
#[derive(Default)]
pub struct Overrides {
    pub content_type: Option<String>,
    pub cache_control: Option<String>,
    pub content_disposition: Option<String>,
    pub content_encoding: Option<String>,
    pub content_language: Option<String>,
    pub expires: Option<Timestamp>,
}

/// Fills the stored-header fields of a GET or HEAD output from `attrs`, with
/// `over` replacing them where given.
macro_rules! stored_headers {
    ($out:expr, $attrs:expr, $over:expr) => {{
        let a = $attrs;
        let o = $over;
        $out.content_type = o.content_type.or_else(|| a.content_type.clone());
        $out.cache_control = o.cache_control.or_else(|| a.cache_control.clone());
        $out.content_disposition = o
            .content_disposition
            .or_else(|| a.content_disposition.clone());
        $out.content_encoding = o.content_encoding.or_else(|| a.content_encoding.clone());
        $out.content_language = o.content_language.or_else(|| a.content_language.clone());
        $out.expires = o.expires.or_else(|| a.expires.map(Timestamp::from));
        $out.metadata = (!a.metadata.is_empty()).then(|| a.metadata.clone().into_iter().collect());
        $out.storage_class = a.storage_class.clone().map(StorageClass::from);
    }};
}
pub(crate) use stored_headers;
