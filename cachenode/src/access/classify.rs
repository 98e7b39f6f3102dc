//! What a request asks, read from its method, address, query and headers alone
//! (never its body, except a purge's lines), so it can be refused before it runs.
//!
//! Reads of an object and of its subresources (ACL, tagging, attributes) are
//! `read`; listings (objects, versions, uploads) are `list` of their prefix;
//! other bucket reads are `list` of the whole bucket, except learning where a
//! bucket is. Writes of an object, its subresources and its multipart uploads
//! (parts listed included) are `write` of its key; a copy is also `read` of its
//! source; bucket writes are `write` of the whole bucket.

use http::Method;
use shoal::node_proto::Purge;
use shoal::scope::Action;

use super::{Ask, On, Request};

/// An S3 operation as s3s names it, on the bucket and key it addresses.
pub fn op(name: &str, bucket: Option<&str>, key: Option<&str>) -> Request {
    let (b, k) = (bucket.unwrap_or(""), key.unwrap_or(""));
    let one = |a: Ask| Request::All(vec![a]);
    match name {
        "GetObject"
        | "HeadObject"
        | "GetObjectAttributes"
        | "GetObjectAcl"
        | "GetObjectTagging" => one(Ask::key(Action::Read, b, k)),
        "PutObject"
        | "DeleteObject"
        | "CreateMultipartUpload"
        | "UploadPart"
        | "CompleteMultipartUpload"
        | "AbortMultipartUpload"
        | "ListParts"
        | "CopyObject"
        | "UploadPartCopy" => one(Ask::key(Action::Write, b, k)),
        // Its keys are in its body: each is checked before it runs.
        "DeleteObjects" => Request::All(vec![]),
        "CreateBucket" | "DeleteBucket" => one(Ask::bucket(Action::Write, b)),
        "HeadBucket" | "GetBucketLocation" => Request::Locate(b.to_owned()),
        "ListBuckets" => one(Ask {
            action: Action::List,
            on: On::Service,
        }),
        _ if key.is_some() => one(Ask::key(Action::Write, b, k)),
        // Anything else the node answers itself (not implemented): the bucket's
        // to write, as a bucket write would be.
        _ => one(Ask::bucket(Action::Write, b)),
    }
}

/// A bucket-level read (a listing, a subresource, HeadBucket) or ListBuckets.
pub fn bucket_read(method: &Method, bucket: &str, query: &[(String, String)]) -> Request {
    if bucket.is_empty() {
        return Request::All(vec![Ask {
            action: Action::List,
            on: On::Service,
        }]);
    }
    let has = |name: &str| query.iter().any(|(k, _)| k == name);
    if method == Method::HEAD || has("location") {
        return Request::Locate(bucket.to_owned());
    }
    let listing = query.iter().all(|(k, _)| {
        super::super::api::lists::LIST_PARAMS.contains(&k.as_str())
            || matches!(
                k.as_str(),
                "versions" | "uploads" | "key-marker" | "version-id-marker" | "upload-id-marker"
            )
    });
    if listing {
        let prefix = query
            .iter()
            .find(|(k, _)| k == "prefix")
            .map_or("", |(_, v)| v.as_str());
        return Request::All(vec![Ask::prefix(Action::List, bucket, prefix)]);
    }
    Request::All(vec![Ask::bucket(Action::List, bucket)])
}

/// An object GET or HEAD passed through (uncached key, subresource, version).
pub fn object_read(bucket: &str, key: &str, query: &[(String, String)]) -> Request {
    // Listing an upload's parts belongs to writing it.
    let action = if query.iter().any(|(k, _)| k == "uploadId") {
        Action::Write
    } else {
        Action::Read
    };
    Request::All(vec![Ask::key(action, bucket, key)])
}

/// A write a gateway passes on: a copy, a bucket write, an object subresource.
pub fn passed_write(bucket: &str, key: &str, copy_source: Option<&str>) -> Request {
    if key.is_empty() {
        return Request::All(vec![Ask::bucket(Action::Write, bucket)]);
    }
    let mut asks = vec![Ask::key(Action::Write, bucket, key)];
    if let Some(src) = copy_source {
        match copy_source_of(src) {
            Some((b, k)) => asks.push(Ask::key(Action::Read, &b, &k)),
            // Unreadable: the origin answers it, but only a key that may read
            // everything gets to ask.
            None => asks.push(Ask::bucket(Action::Read, "*")),
        }
    }
    Request::All(asks)
}

/// `x-amz-copy-source`: `[/]BUCKET/KEY[?versionId=V]`, percent-encoded.
pub fn copy_source_of(v: &str) -> Option<(String, String)> {
    let v = v.strip_prefix('/').unwrap_or(v);
    let v = v.split_once("?versionId=").map_or(v, |(p, _)| p);
    let (b, k) = v.split_once('/')?;
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8()
            .ok()
            .map(|s| s.into_owned())
    };
    let (b, k) = (decode(b)?, decode(k)?);
    (!b.is_empty() && !k.is_empty()).then_some((b, k))
}

/// A purge of `targets` in `bucket`; `local` when it is not to be passed on.
pub fn purge(bucket: &str, targets: &[Purge], local: bool) -> Request {
    let asks = targets
        .iter()
        .map(|t| match t {
            Purge::Key(k) | Purge::KeyExcept(k, _) => Ask::key(Action::Purge, bucket, k),
            Purge::Prefix(p) if p.is_empty() => Ask::bucket(Action::Purge, bucket),
            Purge::Prefix(p) => Ask::prefix(Action::Purge, bucket, p),
        })
        .collect();
    if local {
        Request::LocalPurge(asks)
    } else {
        Request::All(asks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn listings_are_of_their_prefix() {
        let r = bucket_read(
            &Method::GET,
            "a",
            &q(&[("list-type", "2"), ("prefix", "p/")]),
        );
        assert_eq!(r, Request::All(vec![Ask::prefix(Action::List, "a", "p/")]));
        let r = bucket_read(&Method::GET, "a", &q(&[("versioning", "")]));
        assert_eq!(r, Request::All(vec![Ask::bucket(Action::List, "a")]));
        let r = bucket_read(&Method::GET, "a", &q(&[("location", "")]));
        assert_eq!(r, Request::Locate("a".into()));
        let r = bucket_read(&Method::GET, "a", &q(&[("versions", ""), ("prefix", "x")]));
        assert_eq!(r, Request::All(vec![Ask::prefix(Action::List, "a", "x")]));
    }

    #[test]
    fn copies_read_their_source() {
        assert_eq!(
            copy_source_of("/src/a%20b?versionId=1"),
            Some(("src".into(), "a b".into()))
        );
        assert_eq!(copy_source_of("src"), None);
        let r = passed_write("d", "k", Some("s/x"));
        assert_eq!(
            r,
            Request::All(vec![
                Ask::key(Action::Write, "d", "k"),
                Ask::key(Action::Read, "s", "x")
            ])
        );
    }
}
