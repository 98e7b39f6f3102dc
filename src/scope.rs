//! What a node key may do, and where: the `allow` list of an `[[auth.keys]]`
//! entry, grants written `ACTION:RESOURCE`.
//!
//! Actions are `read` (GET, HEAD), `list`, `write` (PUT, multipart, DELETE, copies
//! and bucket writes on a gateway), `purge`, or `*`; resources are `BUCKET` (all
//! of it), `BUCKET/PREFIX*` (keys starting with PREFIX) or `*` (every bucket). A
//! grant covers a key when the key starts with its prefix, and a listing only when
//! the listing's prefix does: a listing is never filtered, so a key that may list
//! `a/p/*` may list prefix `p/x` of `a` but not `` or `p`, which could name keys
//! outside its grant.

use std::fmt;

/// What a request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Read,
    List,
    Write,
    Purge,
}

impl Action {
    pub const ALL: [Action; 4] = [Action::Read, Action::List, Action::Write, Action::Purge];

    pub fn name(self) -> &'static str {
        match self {
            Action::Read => "read",
            Action::List => "list",
            Action::Write => "write",
            Action::Purge => "purge",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a request acts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target<'a> {
    /// The service itself (ListBuckets): only a grant on `*` covers it.
    Service,
    /// A bucket as a whole (its subresources, creating or deleting it).
    Bucket(&'a str),
    /// One key.
    Key(&'a str, &'a str),
    /// Every key starting with a prefix (a listing, a purge of a prefix).
    Prefix(&'a str, &'a str),
}

/// One `ACTION:RESOURCE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// `None` is `*`.
    pub action: Option<Action>,
    /// `None` is `*`.
    pub bucket: Option<String>,
    /// Keys starting with this; empty for the whole bucket.
    pub prefix: String,
}

impl Grant {
    pub fn parse(s: &str) -> Result<Grant, String> {
        let Some((action, resource)) = s.split_once(':') else {
            return Err(format!(
                "{s:?} is not ACTION:RESOURCE (like \"read:bucket/prefix*\")"
            ));
        };
        let action = match action {
            "*" => None,
            "read" => Some(Action::Read),
            "list" => Some(Action::List),
            "write" => Some(Action::Write),
            "purge" => Some(Action::Purge),
            other => {
                return Err(format!(
                    "{s:?}: {other:?} is not an action (read, list, write, purge or *)"
                ))
            }
        };
        if resource == "*" {
            return Ok(Grant {
                action,
                bucket: None,
                prefix: String::new(),
            });
        }
        let (bucket, prefix) = match resource.split_once('/') {
            None => (resource, String::new()),
            Some((b, rest)) => match rest.strip_suffix('*') {
                Some(p) if !p.contains('*') => (b, p.to_owned()),
                _ => {
                    return Err(format!(
                        "{s:?}: a resource is BUCKET, BUCKET/PREFIX* or *, with one * at the end"
                    ))
                }
            },
        };
        if bucket.is_empty()
            || bucket.len() > 255
            || !bucket
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
        {
            return Err(format!(
                "{s:?}: {bucket:?} is not a bucket name (a resource is BUCKET, BUCKET/PREFIX* or *)"
            ));
        }
        if prefix.chars().any(char::is_control) {
            return Err(format!("{s:?}: the prefix holds a control character"));
        }
        Ok(Grant {
            action,
            bucket: Some(bucket.to_owned()),
            prefix,
        })
    }

    fn acts(&self, action: Action) -> bool {
        self.action.is_none_or(|a| a == action)
    }

    fn in_bucket(&self, bucket: &str) -> bool {
        self.bucket.as_deref().is_none_or(|b| b == bucket)
    }

    /// Whether this grant lets `action` act on `target`.
    pub fn covers(&self, action: Action, target: Target<'_>) -> bool {
        if !self.acts(action) {
            return false;
        }
        match target {
            Target::Service => self.bucket.is_none(),
            Target::Bucket(b) => self.in_bucket(b) && self.prefix.is_empty(),
            Target::Key(b, k) | Target::Prefix(b, k) => {
                self.in_bucket(b) && k.starts_with(&self.prefix)
            }
        }
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.action {
            Some(a) => write!(f, "{a}:")?,
            None => f.write_str("*:")?,
        }
        match &self.bucket {
            None => f.write_str("*"),
            Some(b) if self.prefix.is_empty() => f.write_str(b),
            Some(b) => write!(f, "{b}/{}*", self.prefix),
        }
    }
}

/// Everything one key may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    pub grants: Vec<Grant>,
}

impl Scope {
    /// An `allow` list; an error names the entry, by its index, that is wrong.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Scope, (usize, String)> {
        let grants = entries
            .iter()
            .enumerate()
            .map(|(i, e)| Grant::parse(e.as_ref()).map_err(|m| (i, m)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Scope { grants })
    }

    /// What a key without an `allow` list may do: read and list everything.
    pub fn unscoped() -> Scope {
        Scope::parse(&["read:*", "list:*"]).expect("static grants")
    }

    pub fn allows(&self, action: Action, target: Target<'_>) -> bool {
        self.grants.iter().any(|g| g.covers(action, target))
    }

    /// Whether any grant names `bucket` (or every bucket): enough to learn where
    /// the bucket is (HeadBucket, GetBucketLocation), as SDKs ask before a read.
    pub fn touches(&self, bucket: &str) -> bool {
        self.grants.iter().any(|g| g.in_bucket(bucket))
    }

    /// Whether any grant allows `action` anywhere at all.
    pub fn has(&self, action: Action) -> bool {
        self.grants.iter().any(|g| g.acts(action))
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, g) in self.grants.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{g}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(e: &[&str]) -> Scope {
        Scope::parse(e).unwrap()
    }

    #[test]
    fn grammar() {
        for ok in [
            "read:a",
            "list:a/p/*",
            "*:*",
            "purge:a/*",
            "write:my.bucket-1/x y*",
        ] {
            let g = Grant::parse(ok).unwrap();
            assert_eq!(Grant::parse(&g.to_string()).unwrap(), g, "{ok}");
        }
        for bad in [
            "",
            "read",
            "read:",
            "read:a/p",
            "read:a/*p*",
            "read:a*",
            "fetch:a",
            "READ:a",
            "read:*/p*",
            "read:a b",
            "read:/p*",
            "read:a/p\n*",
        ] {
            assert!(Grant::parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert_eq!(Scope::parse(&["read:a", "nope"]).unwrap_err().0, 1);
    }

    #[test]
    fn keys_and_listings() {
        let s = scope(&["read:a/p/*", "list:a/p/*", "purge:b"]);
        assert!(s.allows(Action::Read, Target::Key("a", "p/x")));
        assert!(!s.allows(Action::Read, Target::Key("a", "q/x")));
        assert!(!s.allows(Action::Read, Target::Key("b", "p/x")));
        assert!(!s.allows(Action::Write, Target::Key("a", "p/x")));
        assert!(s.allows(Action::List, Target::Prefix("a", "p/")));
        assert!(s.allows(Action::List, Target::Prefix("a", "p/deeper")));
        // A shorter prefix would list names the key may not see.
        assert!(!s.allows(Action::List, Target::Prefix("a", "p")));
        assert!(!s.allows(Action::List, Target::Prefix("a", "")));
        assert!(!s.allows(Action::List, Target::Bucket("a")));
        assert!(s.allows(Action::Purge, Target::Bucket("b")));
        assert!(s.allows(Action::Purge, Target::Prefix("b", "")));
        assert!(!s.allows(Action::Purge, Target::Service));
        assert!(s.touches("a") && s.touches("b") && !s.touches("c"));
    }

    #[test]
    fn unscoped_reads_and_lists_only() {
        let s = Scope::unscoped();
        assert!(s.allows(Action::Read, Target::Key("any", "k")));
        assert!(s.allows(Action::List, Target::Service));
        assert!(!s.has(Action::Write) && !s.has(Action::Purge));
        let all = scope(&["*:*"]);
        for a in Action::ALL {
            assert!(all.allows(a, Target::Service));
        }
    }
}
