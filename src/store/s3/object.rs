//! GET and HEAD of objects, and presigned GET URLs.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, Method};

use super::call::Call;
use super::encode::query_string;
use super::send::body_stream;
use super::{S3Client, Signer};
use crate::store::{unquote_etag, GetObject, GetResponse, ObjectMeta, StoreError};

impl S3Client {
    /// `HEAD` of an object: its size and ETag.
    pub async fn head_object(&self, req: &GetObject) -> Result<ObjectMeta, StoreError> {
        let call = self.object_call(Method::HEAD, req)?;
        let resp = self.execute(call).await?;
        crate::store::seen::saw(resp.headers());
        self.meta_from_headers(resp.headers()).map(|(m, _, _)| m)
    }

    /// `GET` of an object or a range of it, streamed.
    pub async fn get_object(&self, req: &GetObject) -> Result<GetResponse, StoreError> {
        let call = self.object_call(Method::GET, req)?;
        let resp = self.execute(call).await?;
        crate::store::seen::saw(resp.headers());
        let (meta, start, end) = self.meta_from_headers(resp.headers())?;
        let body = body_stream(
            resp,
            self.inner.opts.timeouts.stall,
            self.inner.label.clone(),
        );
        Ok(GetResponse {
            meta,
            start,
            end,
            body,
        })
    }

    /// `GET` of an object or a range of it, its body to be read into the caller's
    /// buffer: straight off the socket where the endpoint allows it, else as
    /// [`Self::get_object`]'s chunks.
    pub async fn get_object_body(
        &self,
        req: &GetObject,
    ) -> Result<crate::store::BodyResponse, StoreError> {
        if self.inner.sockets.is_none() {
            return self.get_object(req).await.map(Into::into);
        }
        let call = self.object_call(Method::GET, req)?;
        let answer = self.execute_socket(call).await?;
        crate::store::seen::saw(&answer.headers);
        let (meta, start, end) = self.meta_from_headers(&answer.headers)?;
        if answer.body.remaining() != end - start {
            return Err(self.protocol(format!(
                "a body of {} bytes for the range {start}..{end}",
                answer.body.remaining()
            )));
        }
        Ok(crate::store::BodyResponse {
            meta,
            start,
            end,
            body: crate::store::Body::Socket(answer.body),
        })
    }

    /// A presigned GET URL for `bucket/key`, valid for `expires`.
    pub async fn presign_get(
        &self,
        bucket: &str,
        key: &str,
        expires: Duration,
    ) -> Result<String, StoreError> {
        self.check_key(key)?;
        let (url, host) = self.url(bucket, key, "");
        let creds = self
            .credentials()
            .await?
            .ok_or_else(|| StoreError::AccessDenied {
                message: "cannot presign without credentials".into(),
            })?;
        Signer::with_credentials(&creds, &self.region_of(bucket))
            .presign("GET", &url, &[("host", &host)], expires, SystemTime::now())
            .map_err(|m| self.protocol(m))
    }

    fn object_call<'a>(&self, method: Method, req: &'a GetObject) -> Result<Call<'a>, StoreError> {
        self.check_key(&req.key)?;
        let mut call = Call::new(method, &req.bucket, &req.key).query(query_string(
            req.query.iter().map(|(k, v)| (*k, v.clone())).collect(),
        ));
        if let Some(e) = &req.if_match {
            call.signed
                .push(("if-match".into(), format!("\"{}\"", unquote_etag(e))));
        }
        if let Some(e) = &req.if_none_match {
            call.signed
                .push(("if-none-match".into(), format!("\"{}\"", unquote_etag(e))));
        }
        call.unsigned.extend(req.headers.iter().cloned());
        call.range = req.range.map(|r| r.header());
        call.first_byte = req.first_byte;
        call.charge = match req.range {
            Some(crate::store::ByteRange::From {
                first,
                last: Some(last),
            }) => Some(last.saturating_sub(first) + 1),
            _ => None,
        };
        if let Some(r) = &call.range {
            if self.inner.opts.sign_range {
                call.signed.push(("range".into(), r.clone()));
            } else {
                call.unsigned.push(("range", r.clone()));
            }
        }
        Ok(call)
    }

    /// Size, ETag and the carried range from GET/HEAD response headers.
    fn meta_from_headers(&self, h: &HeaderMap) -> Result<(ObjectMeta, u64, u64), StoreError> {
        let get = |n: http::HeaderName| h.get(n).and_then(|v| v.to_str().ok());
        let len: u64 = get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| self.protocol("response has no Content-Length".into()))?;
        let (start, end, size) = match get(http::header::CONTENT_RANGE) {
            Some(cr) => parse_content_range(cr)
                .ok_or_else(|| self.protocol(format!("bad Content-Range {cr:?}")))?,
            None => (0, len, len),
        };
        if end - start != len {
            return Err(self.protocol(format!(
                "Content-Length {len} does not match Content-Range {start}..{end}"
            )));
        }
        let etag = get(http::header::ETAG)
            .map(|v| unquote_etag(v).to_owned())
            .ok_or_else(|| self.protocol("response has no ETag".into()))?;
        Ok((
            ObjectMeta {
                size,
                etag,
                last_modified: get(http::header::LAST_MODIFIED)
                    .and_then(|v| httpdate::parse_http_date(v).ok()),
                content_type: get(http::header::CONTENT_TYPE).map(str::to_owned),
                headers: h
                    .iter()
                    .filter(|(n, _)| crate::store::is_stored_header(n.as_str()))
                    .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
                    .collect(),
            },
            start,
            end,
        ))
    }
}

/// The unquoted `ETag` of an answer (empty if it has none).
pub(super) fn etag_header(resp: &reqwest::Response) -> String {
    resp.headers()
        .get(http::header::ETAG)
        .and_then(|v| v.to_str().ok())
        .map(|v| unquote_etag(v).to_owned())
        .unwrap_or_default()
}

/// `bytes a-b/total` as `(a, b + 1, total)`.
pub fn parse_content_range(v: &str) -> Option<(u64, u64, u64)> {
    let rest = v.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (a, b) = range.split_once('-')?;
    let (a, b, total) = (digits(a)?, digits(b)?, digits(total)?);
    (a <= b && b < total).then_some((a, b + 1, total))
}

/// A number written as 1*DIGIT (Rust's own parse also takes a leading `+`).
fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range() {
        assert_eq!(parse_content_range("bytes 0-9/100"), Some((0, 10, 100)));
        assert_eq!(parse_content_range("bytes 99-99/100"), Some((99, 100, 100)));
        assert_eq!(parse_content_range("bytes 5-4/100"), None);
        assert_eq!(parse_content_range("bytes 0-100/100"), None);
        assert_eq!(parse_content_range("bytes */100"), None);
        assert_eq!(parse_content_range("bytes +0-9/100"), None);
        assert_eq!(parse_content_range("bytes 0-+9/100"), None);
    }
}
