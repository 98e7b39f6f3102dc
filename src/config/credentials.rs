//! What the config says about credentials: keys written in it (inline or named by
//! environment variable), anonymous access, or the AWS credential chain (optionally
//! one profile of it), which [`crate::aws::credentials`] runs.

pub use crate::aws::credentials::{CredentialMode, Credentials};
pub use crate::aws::env::{Env, ProcessEnv};

use super::raw::RawCredentials;

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
