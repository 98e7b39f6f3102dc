//! Writes, for a gateway that forwards them: PUT, multipart uploads, DELETE.

use bytes::Bytes;
use http::Method;

use super::call::Call;
use super::errors::{from_response, ErrorContext};
use super::object::etag_header;
use super::{encode, send, xml, Forwarded, S3Client};
use crate::store::{unquote_etag, StoreError};

impl S3Client {
    /// A single-request `PUT`; returns the new ETag.
    pub async fn put_object(
        &self,
        bucket: &str,
        key: &str,
        body: Bytes,
    ) -> Result<String, StoreError> {
        self.put_object_with(bucket, key, body, Vec::new()).await
    }

    /// A PUT with `headers` (signed): what the object is stored with
    /// (`content-type`, `x-amz-meta-*`, ...) and its conditions (`if-match`,
    /// `if-none-match`). Returns the new ETag.
    pub async fn put_object_with(
        &self,
        bucket: &str,
        key: &str,
        body: Bytes,
        headers: Vec<(String, String)>,
    ) -> Result<String, StoreError> {
        self.check_key(key)?;
        let conditional = headers
            .iter()
            .any(|(k, _)| k == "if-match" || k == "if-none-match");
        let mut call = Call::new(Method::PUT, bucket, key).body(body);
        call.signed = headers.into_iter().map(|(k, v)| (k.into(), v)).collect();
        // A PUT of the same bytes is idempotent: retried; a conditional one is
        // not (its retry could fail on its own first attempt's success).
        if conditional {
            call = call.once();
        }
        let resp = self.execute(call).await?;
        Ok(etag_header(&resp))
    }

    /// An upload (a PUT or an upload part) passed on for someone else, its `len`
    /// bytes streamed from `body` as they arrive rather than held: sent once, with
    /// `headers` (signed) as the client named them, answered as the origin
    /// answered, error statuses too.
    #[allow(clippy::too_many_arguments)]
    pub async fn forward_upload<S>(
        &self,
        method: Method,
        bucket: &str,
        key: &str,
        query: Vec<(String, String)>,
        headers: Vec<(String, String)>,
        body: S,
        len: u64,
    ) -> Result<Forwarded, StoreError>
    where
        S: futures_util::TryStream + Send + 'static,
        S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
        Bytes: From<S::Ok>,
    {
        self.check_key(key)?;
        let q = encode::query_string(query.iter().map(|(k, v)| (k.as_str(), v.clone())).collect());
        let mut c = Call::new(method, bucket, key).query(q).once();
        c.signed = headers.into_iter().map(|(k, v)| (k.into(), v)).collect();
        // Outside the signature: a PUT's payload is signed UNSIGNED-PAYLOAD.
        c.unsigned = vec![("content-length", len.to_string())];
        c.stream = std::sync::Mutex::new(Some(reqwest::Body::wrap_stream(body)));
        c.raw = true;
        let resp = self.execute(c).await?;
        Ok(Forwarded {
            status: resp.status().as_u16(),
            headers: resp.headers().clone(),
            body: send::body_stream(
                resp,
                self.inner.opts.timeouts.stall,
                self.inner.label.clone(),
            ),
        })
    }

    /// Starts a multipart upload; returns its upload id.
    pub async fn create_multipart_upload(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<String, StoreError> {
        self.check_key(key)?;
        let call = Call::new(Method::POST, bucket, key)
            .query("uploads=".into())
            .once();
        let body = self.small(call).await?;
        xml::parse_as::<xml::InitiateMultipartUploadResult>(&body)
            .map(|r| r.upload_id)
            .map_err(|m| self.protocol(m))
    }

    /// Uploads part `number` of an upload; returns the part's ETag.
    pub async fn upload_part(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        number: i32,
        body: Bytes,
    ) -> Result<String, StoreError> {
        self.check_key(key)?;
        // The same part again replaces it: idempotent.
        let call = Call::new(Method::PUT, bucket, key)
            .query(format!(
                "partNumber={number}&uploadId={}",
                encode::query_value(upload_id)
            ))
            .body(body);
        let resp = self.execute(call).await?;
        Ok(etag_header(&resp))
    }

    /// Completes an upload from its parts (number, ETag), ascending; returns the
    /// object's ETag.
    pub async fn complete_multipart_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[(i32, String)],
    ) -> Result<String, StoreError> {
        self.complete_multipart_upload_with(bucket, key, upload_id, parts, Vec::new())
            .await
    }

    /// [`complete_multipart_upload`](Self::complete_multipart_upload) with
    /// `headers` (signed): its conditions, `if-match` and `if-none-match`.
    pub async fn complete_multipart_upload_with(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[(i32, String)],
        headers: Vec<(String, String)>,
    ) -> Result<String, StoreError> {
        self.check_key(key)?;
        let mut xml_body = String::from("<CompleteMultipartUpload>");
        for (n, etag) in parts {
            xml_body.push_str(&format!(
                "<Part><PartNumber>{n}</PartNumber><ETag>\"{}\"</ETag></Part>",
                quick_xml::escape::escape(unquote_etag(etag))
            ));
        }
        xml_body.push_str("</CompleteMultipartUpload>");
        let mut call = Call::new(Method::POST, bucket, key)
            .query(format!("uploadId={}", encode::query_value(upload_id)))
            .body(Bytes::from(xml_body))
            .once();
        call.signed = headers.into_iter().map(|(k, v)| (k.into(), v)).collect();
        let body = self.small(call).await?;
        // S3 may answer 200 and still fail the completion in the body.
        if let Ok(e) = xml::parse_as::<xml::ErrorBody>(&body) {
            if let Some(code) = e.code {
                let ctx = ErrorContext {
                    bucket,
                    key,
                    range: None,
                    head: false,
                };
                return Err(from_response(500, Some(code), e.message, &ctx));
            }
        }
        xml::parse_as::<xml::CompleteMultipartUploadResult>(&body)
            .map(|r| unquote_etag(&r.etag).to_owned())
            .map_err(|m| self.protocol(m))
    }

    pub async fn abort_multipart_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(), StoreError> {
        self.check_key(key)?;
        let call = Call::new(Method::DELETE, bucket, key)
            .query(format!("uploadId={}", encode::query_value(upload_id)));
        self.small(call).await.map(drop)
    }

    pub async fn delete_object(&self, bucket: &str, key: &str) -> Result<(), StoreError> {
        self.check_key(key)?;
        self.execute(Call::new(Method::DELETE, bucket, key))
            .await
            .map(drop)
    }
}
