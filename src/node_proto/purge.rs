//! Purges: `POST /BUCKET?shoal-purge&key=K` (or `&prefix=P`, or a body of such
//! lines) drops what a node caches, and passes it on to every node it knows unless
//! `shoal-local` is given. Nodes pass invalidations to each other as batches.

use bytes::Bytes;
use http::Method;

use crate::store::s3::{query_value, S3Client};
use crate::store::StoreError;

/// What one purge drops.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Purge {
    Key(String),
    Prefix(String),
    /// Every version of the key but this ETag (after an overwrite whose new version
    /// may already be warm).
    KeyExcept(String, String),
}

impl Purge {
    /// As query parameters (`key=K`, `prefix=P`, `keep=ETAG&key=K`), encoded.
    pub fn params(&self) -> String {
        match self {
            Purge::Key(k) => format!("key={}", query_value(k)),
            Purge::Prefix(p) => format!("prefix={}", query_value(p)),
            Purge::KeyExcept(k, e) => format!("keep={}&key={}", query_value(e), query_value(k)),
        }
    }

    /// The purge named by the `key`, `prefix` and `keep` parameters, if they name
    /// exactly one.
    pub fn from_params(
        key: Option<String>,
        prefix: Option<String>,
        keep: Option<String>,
    ) -> Option<Purge> {
        match (key, prefix, keep) {
            (Some(k), None, None) if !k.is_empty() => Some(Purge::Key(k)),
            (Some(k), None, Some(e)) if !k.is_empty() => Some(Purge::KeyExcept(k, e)),
            (None, Some(p), None) => Some(Purge::Prefix(p)),
            _ => None,
        }
    }

    /// A batch body: one purge a line, as [`Purge::params`] writes them.
    pub fn parse_lines(body: &[u8]) -> Result<Vec<Purge>, String> {
        let text = std::str::from_utf8(body).map_err(|_| "purge body is not UTF-8")?;
        let decode = |v: &str| {
            percent_encoding::percent_decode_str(v)
                .decode_utf8()
                .map(|s| s.into_owned())
                .map_err(|_| "purge value is not UTF-8".to_owned())
        };
        text.lines()
            .filter(|l| !l.is_empty())
            .map(|l| {
                let field = |name: &str| {
                    l.split('&')
                        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                        .map(decode)
                        .transpose()
                };
                Purge::from_params(field("key")?, field("prefix")?, field("keep")?).ok_or_else(
                    || "purge body lines are key=K, key=K&keep=ETAG or prefix=P".to_owned(),
                )
            })
            .collect()
    }
}

/// Asks the node behind `client` to drop `target` and, unless `local`, to pass the
/// purge on to every node it knows; returns the node's JSON answer.
pub async fn purge(
    client: &S3Client,
    bucket: &str,
    target: &Purge,
    local: bool,
) -> Result<String, StoreError> {
    let mut query = format!("{}&shoal-purge=", target.params());
    if local {
        query.push_str("&shoal-local=");
    }
    let body = client
        .request(Method::POST, bucket, query, Bytes::new())
        .await?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// Many purges of one bucket in one request, applied by that node only (how nodes
/// pass invalidations on to each other).
pub async fn purge_batch(
    client: &S3Client,
    bucket: &str,
    items: &[Purge],
) -> Result<String, StoreError> {
    let mut body = String::new();
    for item in items {
        body.push_str(&item.params());
        body.push('\n');
    }
    let answer = client
        .request(
            Method::POST,
            bucket,
            "shoal-local=&shoal-purge=".into(),
            Bytes::from(body),
        )
        .await?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_bad_lines_are_refused() {
        let items = vec![
            Purge::Key("a b/ü+%".into()),
            Purge::Prefix(String::new()),
            Purge::KeyExcept("k".into(), "e1".into()),
        ];
        let body: String = items.iter().map(|p| p.params() + "\n").collect();
        assert_eq!(Purge::parse_lines(body.as_bytes()).unwrap(), items);
        assert!(Purge::parse_lines(b"key=").is_err());
        assert!(Purge::parse_lines(b"key=a&prefix=b").is_err());
        assert!(Purge::parse_lines(b"nothing").is_err());
        assert!(Purge::parse_lines(b"key=%FF").is_err());
        assert!(Purge::parse_lines(&[0xff]).is_err());
    }
}
