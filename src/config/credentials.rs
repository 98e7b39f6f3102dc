//! Resolving a key pair from the config, the environment or `~/.aws/credentials`.

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
/// Order: `anonymous`, inline or `*_env` values, a named `profile`, then the
/// standard `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN`, then the
/// `AWS_PROFILE` (or `default`) profile of the shared credentials file.
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
        return from_profile(profile, env)
            .map(|c| Some(CredentialMode::Keys(c)))
            .map_err(|m| ("profile".into(), m));
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
        (None, None) if allow_default_chain => Ok(default_chain(env)),
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

fn default_chain(env: &dyn Env) -> Option<CredentialMode> {
    if let (Some(a), Some(s)) = (
        env.var("AWS_ACCESS_KEY_ID"),
        env.var("AWS_SECRET_ACCESS_KEY"),
    ) {
        return Some(CredentialMode::Keys(Credentials {
            access_key_id: a,
            secret_access_key: s,
            session_token: env.var("AWS_SESSION_TOKEN"),
        }));
    }
    let profile = env.var("AWS_PROFILE").unwrap_or_else(|| "default".into());
    from_profile(&profile, env).ok().map(CredentialMode::Keys)
}

fn credentials_file(env: &dyn Env) -> Option<String> {
    env.var("AWS_SHARED_CREDENTIALS_FILE")
        .or_else(|| env.var("HOME").map(|h| format!("{h}/.aws/credentials")))
}

fn from_profile(profile: &str, env: &dyn Env) -> Result<Credentials, String> {
    let path = credentials_file(env).ok_or("no credentials file (HOME is not set)")?;
    let text = env
        .read_file(&path)
        .ok_or_else(|| format!("cannot read credentials file {path}"))?;
    let section = ini_section(&text, profile)
        .ok_or_else(|| format!("profile [{profile}] not found in {path}"))?;
    let get = |k: &str| {
        section
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    Ok(Credentials {
        access_key_id: get("aws_access_key_id")
            .ok_or_else(|| format!("profile [{profile}] in {path} has no aws_access_key_id"))?,
        secret_access_key: get("aws_secret_access_key")
            .ok_or_else(|| format!("profile [{profile}] in {path} has no aws_secret_access_key"))?,
        session_token: get("aws_session_token"),
    })
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
    fn profile_from_credentials_file() {
        let e = env(&[
            ("HOME", "/h"),
            (
                "file:/h/.aws/credentials",
                "[default]\naws_access_key_id = A\naws_secret_access_key = S\n\n[other]\naws_access_key_id=B\naws_secret_access_key=T\naws_session_token = X\n",
            ),
        ]);
        let raw = RawCredentials {
            profile: Some("other".into()),
            ..Default::default()
        };
        let Some(CredentialMode::Keys(c)) = resolve(&raw, &e, true).unwrap() else {
            panic!()
        };
        assert_eq!(
            (
                c.access_key_id.as_str(),
                c.secret_access_key.as_str(),
                c.session_token.as_deref()
            ),
            ("B", "T", Some("X"))
        );
        // No keys anywhere: the default profile.
        let Some(CredentialMode::Keys(c)) = resolve(&RawCredentials::default(), &e, true).unwrap()
        else {
            panic!()
        };
        assert_eq!(c.access_key_id, "A");
    }

    #[test]
    fn standard_env_wins_over_file() {
        let e = env(&[
            ("AWS_ACCESS_KEY_ID", "E"),
            ("AWS_SECRET_ACCESS_KEY", "F"),
            ("HOME", "/nowhere"),
        ]);
        let Some(CredentialMode::Keys(c)) = resolve(&RawCredentials::default(), &e, true).unwrap()
        else {
            panic!()
        };
        assert_eq!(c.access_key_id, "E");
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
