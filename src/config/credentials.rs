//! What the config says about credentials: keys written in it (inline or named by
//! environment variable), anonymous access, or the AWS credential chain (optionally
//! one profile of it), which [`crate::aws::credentials`] runs.

use std::fmt;

use super::raw::RawCredentials;

/// A resolved S3 key pair. `Debug` never prints the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// How requests are signed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CredentialMode {
    Keys(Credentials),
    /// Unsigned requests, only when asked for with `anonymous = true`.
    Anonymous,
    /// The AWS SDK's default chain, or only `profile` of the shared files:
    /// fetched at start and refreshed before they expire.
    Chain {
        profile: Option<String>,
    },
}

/// Where environment variables and files are read from; tests substitute their own.
pub trait Env {
    fn var(&self, name: &str) -> Option<String>;
    fn read_file(&self, path: &str) -> Option<String>;
}

/// The process environment and file system.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
    fn read_file(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }
}

/// Resolves `raw`; errors are `(key suffix, message)`.
///
/// Order: `anonymous`, inline or `*_env` values, a named `profile` (the chain
/// limited to it), then, where `allow_default_chain`, the whole AWS chain
/// (environment, shared files, web identity, containers, instance metadata).
pub fn resolve(
    raw: &RawCredentials,
    env: &dyn Env,
    allow_default_chain: bool,
) -> Result<Option<CredentialMode>, (String, String)> {
    if raw.anonymous == Some(true) {
        let extra = raw.access_key_id.is_some()
            || raw.access_key_id_env.is_some()
            || raw.secret_access_key.is_some()
            || raw.secret_access_key_env.is_some()
            || raw.profile.is_some();
        if extra {
            return Err((
                "anonymous".into(),
                "anonymous = true cannot be combined with keys or a profile".into(),
            ));
        }
        return Ok(Some(CredentialMode::Anonymous));
    }
    let access = pick(
        &raw.access_key_id,
        &raw.access_key_id_env,
        "access_key_id",
        env,
    )?;
    let secret = pick(
        &raw.secret_access_key,
        &raw.secret_access_key_env,
        "secret_access_key",
        env,
    )?;
    let token = pick(
        &raw.session_token,
        &raw.session_token_env,
        "session_token",
        env,
    )?;
    if let Some(profile) = &raw.profile {
        if access.is_some() || secret.is_some() {
            return Err((
                "profile".into(),
                "a profile cannot be combined with inline or env keys".into(),
            ));
        }
        if profile.trim().is_empty() {
            return Err(("profile".into(), "is empty".into()));
        }
        return Ok(Some(CredentialMode::Chain {
            profile: Some(profile.clone()),
        }));
    }
    match (access, secret) {
        (Some(a), Some(s)) => Ok(Some(CredentialMode::Keys(Credentials {
            access_key_id: a,
            secret_access_key: s,
            session_token: token,
        }))),
        (Some(_), None) => Err((
            "secret_access_key".into(),
            "access_key_id is set but secret_access_key is not".into(),
        )),
        (None, Some(_)) => Err((
            "access_key_id".into(),
            "secret_access_key is set but access_key_id is not".into(),
        )),
        (None, None) if allow_default_chain => Ok(Some(CredentialMode::Chain { profile: None })),
        (None, None) => Ok(None),
    }
}

fn pick(
    inline: &Option<String>,
    env_name: &Option<String>,
    key: &str,
    env: &dyn Env,
) -> Result<Option<String>, (String, String)> {
    match (inline, env_name) {
        (Some(_), Some(_)) => Err((
            key.into(),
            format!("{key} is given both inline and by {key}_env: keep one"),
        )),
        (Some(v), None) => Ok(Some(v.clone())),
        (None, Some(var)) => env.var(var).map(Some).ok_or_else(|| {
            (
                format!("{key}_env"),
                format!("environment variable {var} is not set"),
            )
        }),
        (None, None) => Ok(None),
    }
}

/// The value of `key` in section `[section]` of an INI text such as the AWS
/// shared config file.
pub(crate) fn ini_value(text: &str, section: &str, key: &str) -> Option<String> {
    ini_section(text, section)?
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
        .filter(|v| !v.is_empty())
}

/// The `key = value` pairs of `[name]` in an INI text such as the AWS credentials file.
fn ini_section(text: &str, name: &str) -> Option<Vec<(String, String)>> {
    let mut found = None;
    let mut current: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(h) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = Some(h.trim().to_owned());
            if current.as_deref() == Some(name) {
                found.get_or_insert_with(Vec::new);
            }
            continue;
        }
        if current.as_deref() == Some(name) {
            if let Some((k, v)) = line.split_once('=') {
                found
                    .get_or_insert_with(Vec::new)
                    .push((k.trim().to_owned(), v.trim().to_owned()));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    pub struct MapEnv(pub HashMap<String, String>);
    impl Env for MapEnv {
        fn var(&self, n: &str) -> Option<String> {
            self.0.get(n).cloned()
        }
        fn read_file(&self, p: &str) -> Option<String> {
            self.0.get(&format!("file:{p}")).cloned()
        }
    }

    fn env(pairs: &[(&str, &str)]) -> MapEnv {
        MapEnv(
            pairs
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
        )
    }

    #[test]
    fn no_keys_means_the_chain_and_a_profile_narrows_it() {
        let e = env(&[("HOME", "/h")]);
        let raw = RawCredentials {
            profile: Some("other".into()),
            ..Default::default()
        };
        assert_eq!(
            resolve(&raw, &e, true).unwrap(),
            Some(CredentialMode::Chain {
                profile: Some("other".into())
            })
        );
        assert_eq!(
            resolve(&RawCredentials::default(), &e, true).unwrap(),
            Some(CredentialMode::Chain { profile: None })
        );
        // Where the chain is not allowed (cluster keys), nothing.
        assert_eq!(
            resolve(&RawCredentials::default(), &e, false).unwrap(),
            None
        );
    }

    #[test]
    fn ini_values_by_section() {
        let text = "[default]\nregion = us-west-2\n\n[profile other]\nregion=eu-west-1\n";
        assert_eq!(
            ini_value(text, "default", "region").as_deref(),
            Some("us-west-2")
        );
        assert_eq!(
            ini_value(text, "profile other", "region").as_deref(),
            Some("eu-west-1")
        );
        assert_eq!(ini_value(text, "profile nope", "region"), None);
    }

    #[test]
    fn debug_hides_secret() {
        let c = Credentials {
            access_key_id: "AK".into(),
            secret_access_key: "very-secret".into(),
            session_token: Some("tok".into()),
        };
        let s = format!("{c:?}");
        assert!(!s.contains("very-secret") && !s.contains("tok\""), "{s}");
    }
}
