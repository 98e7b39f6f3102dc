//! AWS's own S3 endpoints: which host serves a region, and what an answer says
//! about the region a bucket is really in.

/// How a client reaches AWS's S3 (the config names no endpoint).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AwsEndpoint {
    pub fips: bool,
    pub dual_stack: bool,
    /// The endpoint was overridden (`AWS_ENDPOINT_URL_S3`, a VPC endpoint, a
    /// test): it stays the same host whatever the region, only signing follows.
    pub overridden: bool,
}

impl AwsEndpoint {
    /// `s3[-fips][.dualstack].REGION.amazonaws.com[.cn]`
    pub fn host(&self, region: &str) -> String {
        let mut h = String::from("s3");
        if self.fips {
            h.push_str("-fips");
        }
        if self.dual_stack {
            h.push_str(".dualstack");
        }
        let suffix = if region.starts_with("cn-") {
            "amazonaws.com.cn"
        } else {
            "amazonaws.com"
        };
        format!("{h}.{region}.{suffix}")
    }

    pub fn url(&self, region: &str) -> url::Url {
        url::Url::parse(&format!("https://{}", self.host(region)))
            .expect("a region name makes a host name")
    }
}

/// The region S3 says a bucket is in: the `x-amz-bucket-region` header (on a
/// 301, a 400 and a HEAD of the bucket), or the `<Region>` of an
/// `AuthorizationHeaderMalformed` or `PermanentRedirect` body.
pub fn bucket_region(headers: &http::HeaderMap, body: &[u8]) -> Option<String> {
    if let Some(r) = headers
        .get("x-amz-bucket-region")
        .and_then(|v| v.to_str().ok())
        .filter(|r| is_region_name(r))
    {
        return Some(r.to_owned());
    }
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find("<Region>")? + "<Region>".len();
    let end = start + text[start..].find("</Region>")?;
    let r = text[start..end].trim();
    is_region_name(r).then(|| r.to_owned())
}

/// Letters, digits and dashes: what a region name is made of.
pub fn is_region_name(r: &str) -> bool {
    !r.is_empty() && r.len() <= 64 && r.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        let e = AwsEndpoint::default();
        assert_eq!(e.host("eu-west-1"), "s3.eu-west-1.amazonaws.com");
        let all = AwsEndpoint {
            fips: true,
            dual_stack: true,
            overridden: false,
        };
        assert_eq!(
            all.host("us-east-2"),
            "s3-fips.dualstack.us-east-2.amazonaws.com"
        );
        assert_eq!(e.host("cn-north-1"), "s3.cn-north-1.amazonaws.com.cn");
    }

    #[test]
    fn region_from_header_or_body() {
        let mut h = http::HeaderMap::new();
        assert_eq!(
            bucket_region(&h, b"<Error><Region>eu-west-1</Region></Error>"),
            Some("eu-west-1".into())
        );
        h.insert("x-amz-bucket-region", "ap-south-1".parse().unwrap());
        assert_eq!(bucket_region(&h, b""), Some("ap-south-1".into()));
        let h = http::HeaderMap::new();
        assert_eq!(bucket_region(&h, b"<Region>not a region!</Region>"), None);
        assert_eq!(bucket_region(&h, b"<Error/>"), None);
    }
}
