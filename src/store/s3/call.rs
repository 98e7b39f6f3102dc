//! What one request is: built with [`Call`], addressed (path or
//! virtual-hosted, at its bucket's own region) and given its headers, signed (a
//! bodiless request's signature reused while it is valid). Sending it is
//! [`super::send`]'s.

use std::borrow::Cow;
use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderMap, Method};

use super::errors::ErrorContext;
use super::sign::{Payload, Signer};
use super::Addressing;
use super::{encode, S3Client};
use crate::store::StoreError;
use aws_credential_types::Credentials as AwsCredentials;

/// A request before signing.
pub(super) struct Call<'a> {
    pub method: Method,
    pub bucket: &'a str,
    pub key: &'a str,
    pub query: String,
    /// Headers covered by the signature (names lower-case; some, such as an
    /// object's `x-amz-meta-*`, are only known at run time).
    pub signed: Vec<(Cow<'static, str>, String)>,
    /// Headers sent outside it.
    pub unsigned: Vec<(&'static str, String)>,
    pub body: Bytes,
    /// The `Range` header, for error messages.
    pub range: Option<String>,
    /// The bytes the answer will carry, when the request says (a bounded range):
    /// charged to the origin's budget before it is sent.
    pub charge: Option<u64>,
    /// The first-byte deadline, if not the client's.
    pub first_byte: Option<std::time::Duration>,
    pub retry: bool,
    /// Hand back every answer as it came, error statuses too (a request passed
    /// through for someone else, who should see what the service said).
    pub raw: bool,
    /// A body streamed rather than held (an upload passed on as it arrives):
    /// taken by the first attempt, so such a call is sent once.
    pub stream: std::sync::Mutex<Option<reqwest::Body>>,
}

impl<'a> Call<'a> {
    /// A retried, bodiless request of `bucket/key` (`""` for the bucket itself).
    pub fn new(method: Method, bucket: &'a str, key: &'a str) -> Self {
        Call {
            method,
            bucket,
            key,
            query: String::new(),
            signed: vec![],
            unsigned: vec![],
            body: Bytes::new(),
            range: None,
            charge: None,
            first_byte: None,
            retry: true,
            raw: false,
            stream: std::sync::Mutex::new(None),
        }
    }
    pub fn query(mut self, q: String) -> Self {
        self.query = q;
        self
    }
    pub fn body(mut self, b: Bytes) -> Self {
        self.body = b;
        self
    }
    /// Not idempotent: sent once.
    pub fn once(mut self) -> Self {
        self.retry = false;
        self
    }

    /// What the request is about, for its error answers.
    pub(super) fn context(&self) -> ErrorContext<'_> {
        ErrorContext {
            bucket: self.bucket,
            key: self.key,
            range: self.range.as_deref(),
            head: self.method == Method::HEAD,
        }
    }
}

impl S3Client {
    pub(super) fn protocol(&self, message: String) -> StoreError {
        StoreError::Protocol {
            endpoint: self.inner.label.clone(),
            message,
        }
    }

    pub(super) fn check_key(&self, key: &str) -> Result<(), StoreError> {
        match encode::key_problem(key) {
            Some(reason) => Err(StoreError::InvalidKey {
                key: key.into(),
                reason: reason.into(),
            }),
            None => Ok(()),
        }
    }

    /// The encoded URL and the Host header value it implies.
    pub(super) fn url(&self, bucket: &str, key: &str, query: &str) -> (String, String) {
        let opts = &self.inner.opts;
        let ep = &opts.endpoint;
        let mut host = ep.host_str().unwrap_or_default().to_owned();
        // A bucket found in another region is reached at that region's endpoint.
        if let Some(aws) = opts.aws.filter(|a| !a.overridden) {
            let region = self.region_of(bucket);
            if !bucket.is_empty() && region != opts.region {
                host = aws.host(&region);
            }
        }
        let port = ep.port().map(|p| format!(":{p}")).unwrap_or_default();
        // A dotted name cannot be a host under a TLS wildcard certificate.
        let addressing = match opts.addressing {
            Addressing::Virtual if bucket.contains('.') && ep.scheme() == "https" => {
                Addressing::Path
            }
            a => a,
        };
        let (authority, path) = match addressing {
            // The service itself (ListBuckets), whatever the addressing.
            _ if bucket.is_empty() => (format!("{host}{port}"), "/".to_owned()),
            Addressing::Path if key.is_empty() => (
                format!("{host}{port}"),
                format!("/{}", encode::path(bucket)),
            ),
            Addressing::Path => (
                format!("{host}{port}"),
                format!("/{}/{}", encode::path(bucket), encode::path(key)),
            ),
            Addressing::Virtual => (
                format!("{bucket}.{host}{port}"),
                format!("/{}", encode::path(key)),
            ),
        };
        let q = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        (format!("{}://{authority}{path}{q}", ep.scheme()), authority)
    }

    /// Headers every origin request carries for the bucket's sake.
    fn option_headers(&self, call: &Call<'_>) -> Vec<(&'static str, String)> {
        let o = &self.inner.opts.request;
        let mut h = Vec::new();
        if call.bucket.is_empty() {
            return h;
        }
        if o.requester_pays {
            h.push(("x-amz-request-payer", "requester".to_owned()));
        }
        if let Some(owner) = &o.expected_bucket_owner {
            h.push(("x-amz-expected-bucket-owner", owner.clone()));
        }
        // SSE-C belongs to object reads and writes, not to listings.
        if let Some(k) = &o.sse_customer_key {
            if !call.key.is_empty() && call.method != Method::DELETE {
                h.push((
                    "x-amz-server-side-encryption-customer-algorithm",
                    "AES256".to_owned(),
                ));
                h.push(("x-amz-server-side-encryption-customer-key", k.key.clone()));
                h.push((
                    "x-amz-server-side-encryption-customer-key-md5",
                    k.key_md5.clone(),
                ));
            }
        }
        h
    }

    /// The headers `call` is sent with to `url` (its `host`), signed with
    /// `creds` unless anonymous.
    pub(super) fn headers(
        &self,
        call: &Call<'_>,
        url: &str,
        host: &str,
        creds: Option<&AwsCredentials>,
    ) -> Result<HeaderMap, StoreError> {
        let mut headers = HeaderMap::new();
        let options = self.option_headers(call);
        let signed: Vec<(&str, &str)> = call
            .signed
            .iter()
            .map(|(k, v)| (k.as_ref(), v.as_str()))
            .chain(options.iter().map(|(k, v)| (*k, v.as_str())))
            .collect();
        let unsigned = call.unsigned.iter().map(|(k, v)| (*k, v.as_str()));
        for (k, v) in signed.iter().copied().chain(unsigned) {
            let name = http::HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| self.protocol(format!("bad header name {k}")))?;
            headers.insert(
                name,
                v.parse()
                    .map_err(|_| self.protocol(format!("bad header value for {k}")))?,
            );
        }
        let Some(creds) = creds else {
            return Ok(headers);
        };
        let region = self.region_of(call.bucket);
        let mut to_sign: Vec<(&str, &str)> = vec![("host", host)];
        to_sign.extend(signed.iter().copied());
        let bodiless = call.method != Method::PUT && call.body.is_empty();
        let sign = |time| -> Result<_, StoreError> {
            let payload = if call.method == Method::PUT {
                Payload::Unsigned
            } else {
                Payload::Bytes(&call.body)
            };
            let added = Signer::with_credentials(creds, &region)
                .sign_headers(call.method.as_str(), url, &to_sign, payload, time)
                .map_err(|m| self.protocol(m))?;
            added
                .into_iter()
                .map(|(k, v)| match (k.parse(), v.parse()) {
                    (Ok(name), Ok(value)) => Ok((name, value)),
                    _ => Err(self.protocol(format!("bad signed header {k}"))),
                })
                .collect()
        };
        let added = if bodiless {
            let what =
                super::signatures::request_key(call.method.as_str(), url, &to_sign, &region, creds);
            self.inner
                .signatures
                .signed(what, SystemTime::now(), sign)?
        } else {
            sign(SystemTime::now())?
        };
        for (name, value) in added {
            headers.insert(name, value);
        }
        Ok(headers)
    }
}
