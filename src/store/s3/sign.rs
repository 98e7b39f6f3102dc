//! SigV4 signing through `aws-sigv4`, set up the way S3 expects it: the path is
//! taken as sent (single encoding, no normalization) and the payload hash travels in
//! `x-amz-content-sha256`.
//!
//! `Range` can be left out of the signature on purpose: a cache node widens a small
//! range to whole blocks, which it could not do if the range were signed (SigV4
//! permits unsigned extra headers).

use std::time::{Duration, SystemTime};

use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest,
    SignatureLocation, SigningSettings, UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;

use crate::aws::credentials::Credentials;

/// The payload hash to sign with.
pub enum Payload<'a> {
    /// An in-memory body, hashed (use `&[]` for bodiless requests).
    Bytes(&'a [u8]),
    /// `UNSIGNED-PAYLOAD`, for streamed uploads and presigned URLs.
    Unsigned,
}

/// Signs requests for one key pair, region and service.
#[derive(Clone)]
pub struct Signer {
    identity: aws_smithy_runtime_api::client::identity::Identity,
    region: String,
    service: String,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("region", &self.region)
            .field("service", &self.service)
            .finish()
    }
}

impl Signer {
    pub fn new(creds: &Credentials, region: &str) -> Self {
        Self::for_service(creds, region, "s3")
    }

    /// For S3 with credentials from a provider (which may carry an expiry).
    pub fn with_credentials(creds: &aws_credential_types::Credentials, region: &str) -> Self {
        Self {
            identity: creds.clone().into(),
            region: region.to_owned(),
            service: "s3".to_owned(),
        }
    }

    pub fn for_service(creds: &Credentials, region: &str, service: &str) -> Self {
        let c = aws_credential_types::Credentials::new(
            creds.access_key_id.clone(),
            creds.secret_access_key.clone(),
            creds.session_token.clone(),
            None,
            "shoal-config",
        );
        Self {
            identity: c.into(),
            region: region.to_owned(),
            service: service.to_owned(),
        }
    }

    fn settings(
        &self,
        location: SignatureLocation,
        checksum: PayloadChecksumKind,
    ) -> SigningSettings {
        let mut s = SigningSettings::default();
        if self.service == "s3" {
            s.percent_encoding_mode = PercentEncodingMode::Single;
            s.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        }
        s.payload_checksum_kind = checksum;
        s.signature_location = location;
        s
    }

    /// Headers to add to a request of `method` to the already-encoded `url` carrying
    /// `headers` (all of them are signed: leave out what must stay unsigned).
    pub fn sign_headers(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        payload: Payload<'_>,
        time: SystemTime,
    ) -> Result<Vec<(String, String)>, String> {
        let checksum = if self.service == "s3" {
            PayloadChecksumKind::XAmzSha256
        } else {
            PayloadChecksumKind::NoHeader
        };
        let settings = self.settings(SignatureLocation::Headers, checksum);
        let (instructions, _) = self.run(method, url, headers, payload, time, settings)?;
        Ok(instructions.0)
    }

    /// A presigned URL for `method` on `url`, valid for `expires`.
    pub fn presign(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        expires: Duration,
        time: SystemTime,
    ) -> Result<String, String> {
        let mut settings = self.settings(
            SignatureLocation::QueryParams,
            PayloadChecksumKind::NoHeader,
        );
        settings.expires_in = Some(expires);
        let ((_, params), _) = self.run(method, url, headers, Payload::Unsigned, time, settings)?;
        let mut out = url.to_owned();
        for (i, (k, v)) in params.iter().enumerate() {
            let sep = if i == 0 && !url.contains('?') {
                '?'
            } else {
                '&'
            };
            out.push(sep);
            out.push_str(k);
            out.push('=');
            out.push_str(&super::encode::query_value(v));
        }
        Ok(out)
    }

    #[allow(clippy::type_complexity)]
    fn run(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        payload: Payload<'_>,
        time: SystemTime,
        settings: SigningSettings,
    ) -> Result<((Vec<(String, String)>, Vec<(String, String)>), String), String> {
        let params = v4::SigningParams::builder()
            .identity(&self.identity)
            .region(&self.region)
            .name(&self.service)
            .time(time)
            .settings(settings)
            .build()
            .map_err(|e| format!("signing parameters: {e}"))?
            .into();
        let body = match payload {
            Payload::Bytes(b) => SignableBody::Bytes(b),
            Payload::Unsigned => SignableBody::UnsignedPayload,
        };
        let req = SignableRequest::new(method, url, headers.iter().copied(), body)
            .map_err(|e| format!("cannot sign {url}: {e}"))?;
        let out = sign(req, &params).map_err(|e| format!("cannot sign {url}: {e}"))?;
        let (instructions, signature) = out.into_parts();
        let (h, q) = instructions.into_parts();
        let h = h
            .into_iter()
            .map(|h| (h.name().to_owned(), h.value().to_owned()))
            .collect();
        let q = q
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.into_owned()))
            .collect();
        Ok(((h, q), signature))
    }
}

#[cfg(test)]
mod tests {
    //! Published AWS example vectors.
    use super::*;

    fn at(s: &str) -> SystemTime {
        httpdate::parse_http_date(s).unwrap()
    }

    fn auth_header(h: &[(String, String)]) -> String {
        h.iter()
            .find(|(k, _)| k == "authorization")
            .unwrap()
            .1
            .clone()
    }

    /// The AWS SigV4 test suite's `get-vanilla` case.
    #[test]
    fn sigv4_suite_get_vanilla() {
        let creds = Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
        };
        let s = Signer::for_service(&creds, "us-east-1", "service");
        let h = s
            .sign_headers(
                "GET",
                "https://example.amazonaws.com/",
                &[("host", "example.amazonaws.com")],
                Payload::Bytes(b""),
                at("Sun, 30 Aug 2015 12:36:00 GMT"),
            )
            .unwrap();
        assert_eq!(
            auth_header(&h),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
    }

    fn s3_example_creds() -> Credentials {
        Credentials {
            access_key_id: "AKIAIOSFODNN7EXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
        }
    }

    /// The S3 documentation's "GET Object" header-signing example (Range signed).
    #[test]
    fn s3_doc_get_object_example() {
        let s = Signer::new(&s3_example_creds(), "us-east-1");
        let h = s
            .sign_headers(
                "GET",
                "https://examplebucket.s3.amazonaws.com/test.txt",
                &[
                    ("host", "examplebucket.s3.amazonaws.com"),
                    ("range", "bytes=0-9"),
                ],
                Payload::Bytes(b""),
                at("Fri, 24 May 2013 00:00:00 GMT"),
            )
            .unwrap();
        assert_eq!(
            auth_header(&h),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    /// The S3 documentation's presigned URL example.
    #[test]
    fn s3_doc_presigned_example() {
        let s = Signer::new(&s3_example_creds(), "us-east-1");
        let url = s
            .presign(
                "GET",
                "https://examplebucket.s3.amazonaws.com/test.txt",
                &[("host", "examplebucket.s3.amazonaws.com")],
                Duration::from_secs(86400),
                at("Fri, 24 May 2013 00:00:00 GMT"),
            )
            .unwrap();
        assert!(
            url.ends_with(
                "X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
            ),
            "{url}"
        );
        assert!(url.contains("X-Amz-Expires=86400"), "{url}");
    }
}
