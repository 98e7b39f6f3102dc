//! [`Signatures`]: the signed headers of requests made this second, given again
//! to a request that signs the very same things.
//!
//! A SigV4 signature is a function of what is signed and of the signing time,
//! which it carries to the second. A sequential read asks one object for range
//! after range (a node's range is not signed), a thousand times a second: each
//! of those requests would be signed to the same bytes, so they are signed once.
//! Nothing about a request changes by it; the time a signature carries is the
//! current second, as if it had just been made.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_credential_types::Credentials as AwsCredentials;
use http::{HeaderName, HeaderValue};

/// Past this many kept, signatures of earlier seconds are let go.
const MAX_KEPT: usize = 256;

/// Headers a signature adds to a request.
pub(super) type Signed = Vec<(HeaderName, HeaderValue)>;

#[derive(Default)]
pub(super) struct Signatures {
    kept: Mutex<HashMap<String, (u64, Signed)>>,
}

impl Signatures {
    /// The headers signing `what` at `now` adds: those made this second for the
    /// same `what`, else `sign`'s (given the time to sign with: `now` to the
    /// second). `what` must name everything signed, credentials included.
    pub fn signed<E>(
        &self,
        what: String,
        now: SystemTime,
        sign: impl FnOnce(SystemTime) -> Result<Signed, E>,
    ) -> Result<Signed, E> {
        let second = now
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs();
        if let Some((at, headers)) = self.kept.lock().unwrap().get(&what) {
            if *at == second {
                return Ok(headers.clone());
            }
        }
        let headers = sign(UNIX_EPOCH + Duration::from_secs(second))?;
        let mut kept = self.kept.lock().unwrap();
        if kept.len() >= MAX_KEPT {
            kept.retain(|_, (at, _)| *at == second);
            if kept.len() >= MAX_KEPT {
                kept.clear();
            }
        }
        kept.insert(what, (second, headers.clone()));
        Ok(headers)
    }
}

/// Everything a bodiless request's signature covers but its time, as one key.
pub(super) fn request_key(
    method: &str,
    url: &str,
    signed: &[(&str, &str)],
    region: &str,
    creds: &AwsCredentials,
) -> String {
    use std::fmt::Write;
    // Not the secret itself: a hash of it, with the token (which can run to a
    // kilobyte), taken without a copy of either.
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(creds.secret_access_key().as_bytes());
    h.update(b"\n");
    h.update(creds.session_token().unwrap_or("").as_bytes());
    let secret = h.digest();
    let mut what = format!(
        "{method} {url}\n{region}\n{}\n{secret:x}\n",
        creds.access_key_id()
    );
    for (k, v) in signed {
        let _ = writeln!(what, "{k}:{v}");
    }
    what
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn headers(v: &str) -> Signed {
        vec![(
            HeaderName::from_static("authorization"),
            HeaderValue::from_str(v).unwrap(),
        )]
    }

    #[test]
    fn the_same_request_in_the_same_second_is_signed_once() {
        let s = Signatures::default();
        let signs = Cell::new(0);
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_250);
        let sign = |at: SystemTime| {
            signs.set(signs.get() + 1);
            // Signed with the second, not the instant.
            assert_eq!(at, UNIX_EPOCH + Duration::from_secs(1_700_000_000));
            Ok::<_, ()>(headers(&format!("sig{}", signs.get())))
        };
        let a = s.signed("GET /b/k".into(), t, sign).unwrap();
        let b = s
            .signed("GET /b/k".into(), t + Duration::from_millis(700), sign)
            .unwrap();
        assert_eq!(a, b);
        assert_eq!(signs.get(), 1);
        // Another request, or the next second, is signed anew.
        let c = s.signed("GET /b/other".into(), t, sign).unwrap();
        assert_ne!(a, c);
        let later = UNIX_EPOCH + Duration::from_secs(1_700_000_001);
        let d = s
            .signed("GET /b/k".into(), later, |at| {
                assert_eq!(at, later);
                Ok::<_, ()>(headers("next"))
            })
            .unwrap();
        assert_eq!(d, headers("next"));
        assert_eq!(signs.get(), 2);
    }

    #[test]
    fn a_failed_signing_is_not_kept_and_the_kept_are_bounded() {
        let s = Signatures::default();
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert!(s.signed("GET /b/k".into(), t, |_| Err("no")).is_err());
        let v = s
            .signed("GET /b/k".into(), t, |_| Ok::<_, ()>(headers("ok")))
            .unwrap();
        assert_eq!(v, headers("ok"));
        for i in 0..3 * MAX_KEPT {
            s.signed(format!("GET /b/{i}"), t, |_| Ok::<_, ()>(headers("x")))
                .unwrap();
        }
        assert!(s.kept.lock().unwrap().len() <= MAX_KEPT);
    }

    #[test]
    fn the_key_names_everything_signed_and_whose_keys_sign_it() {
        let creds = |secret: &str, token: Option<&str>| {
            AwsCredentials::new("AKID", secret, token.map(str::to_owned), None, "test")
        };
        let a = creds("s1", None);
        let url = "http://n1:9000/b/k";
        let headers = [("host", "n1:9000"), ("if-match", "\"e1\"")];
        let base = request_key("GET", url, &headers, "r1", &a);
        assert_eq!(
            base,
            request_key("GET", url, &headers, "r1", &creds("s1", None))
        );
        assert!(!base.contains("s1"), "the secret itself is not in the key");
        for other in [
            request_key("HEAD", url, &headers, "r1", &a),
            request_key("GET", "http://n1:9000/b/k2", &headers, "r1", &a),
            request_key("GET", url, &headers[..1], "r1", &a),
            request_key("GET", url, &[headers[0], ("if-match", "\"e2\"")], "r1", &a),
            request_key("GET", url, &headers, "r2", &a),
            request_key("GET", url, &headers, "r1", &creds("s2", None)),
            request_key("GET", url, &headers, "r1", &creds("s1", Some("t"))),
        ] {
            assert_ne!(base, other);
        }
    }
}
