//! Percent-encoding for S3 paths and query strings.
//!
//! Keys are bytes-exact: everything but RFC 3986 unreserved characters (and `/` in
//! paths) is encoded, so spaces, `+`, `%` and unicode survive, and the encoded form
//! is exactly what SigV4 signs.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// Everything except `A-Z a-z 0-9 - _ . ~`.
const QUERY: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');
/// As [`QUERY`], but `/` stays a separator.
const PATH: &AsciiSet = &QUERY.remove(b'/');

/// `name=value` pairs as a query string, sorted (the canonical order, so the signed
/// and the sent query agree) and encoded.
pub(super) fn query_string(mut q: Vec<(&str, String)>) -> String {
    q.sort();
    q.iter()
        .map(|(k, v)| format!("{k}={}", query_value(v)))
        .collect::<Vec<_>>()
        .join("&")
}

pub fn path(s: &str) -> String {
    utf8_percent_encode(s, PATH).to_string()
}

pub fn query_value(s: &str) -> String {
    utf8_percent_encode(s, QUERY).to_string()
}

/// Why `key` cannot be sent in a URL path, if it cannot.
///
/// URL parsers remove `.` and `..` segments (also when written `%2E`), so such a key
/// would silently address another object. We refuse it instead.
pub fn key_problem(key: &str) -> Option<&'static str> {
    if key.is_empty() {
        return Some("the key is empty");
    }
    if key.split('/').any(|seg| seg == "." || seg == "..") {
        return Some("a path segment of \".\" or \"..\" cannot be addressed through a URL");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_keys_exactly() {
        assert_eq!(path("a b/c+d%e/ü"), "a%20b/c%2Bd%25e/%C3%BC");
        assert_eq!(path("//lead"), "//lead");
        assert_eq!(query_value("a/b c"), "a%2Fb%20c");
        assert!(key_problem("a/../b").is_some());
        assert!(key_problem("a/..b").is_none());
        assert!(key_problem("").is_some());
    }
}
