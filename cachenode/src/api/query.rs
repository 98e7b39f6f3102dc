//! The query of a request's URI, as the routes read it: shoal's own parameters
//! (`shoal-purge`, `shoal-take&from=ID`) and the S3 ones passed on to the
//! origin.

/// The query of `uri` as decoded name and value pairs (`+` is a plus, as SigV4
/// reads it).
pub fn query_pairs(uri: &http::Uri) -> Vec<(String, String)> {
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// The first parameter `name` of `uri`'s query, its value decoded (none when
/// absent; empty when given without a value).
pub fn query_param(uri: &http::Uri, name: &str) -> Option<String> {
    uri.query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| {
            percent_encoding::percent_decode_str(v)
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}
