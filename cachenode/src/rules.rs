//! Caching rules: what the node does with each key, decided by the first rule whose
//! glob matches `bucket/key`. With no rules everything is cached at the node's
//! block size; with rules, a key that matches none passes through uncached (an
//! allowlist), and `shoal_node_uncached_requests_total` shows how often.

use std::time::Duration;

use shoal::config::CacheRule;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub cache: bool,
    /// The block size (widening unit) for this key.
    pub block_size: u64,
    /// How long what is cached of this key may be served before it expires.
    pub ttl: Option<Duration>,
    /// How old a cached listing of this prefix a plain client may get.
    pub list_ttl: Option<Duration>,
}

pub struct Rules {
    rules: Vec<CacheRule>,
    default_block: u64,
}

impl Rules {
    pub fn new(rules: Vec<CacheRule>, default_block: u64) -> Rules {
        Rules {
            rules,
            default_block,
        }
    }

    pub fn policy(&self, bucket: &str, key: &str) -> Policy {
        let cached = Policy {
            cache: true,
            block_size: self.default_block,
            ttl: None,
            list_ttl: None,
        };
        if self.rules.is_empty() {
            return cached;
        }
        let path = format!("{bucket}/{key}");
        match self.rules.iter().find(|r| r.matcher.is_match(&path)) {
            Some(r) => Policy {
                cache: r.cache,
                block_size: r.block_size.unwrap_or(self.default_block),
                ttl: r.ttl,
                list_ttl: r.list_ttl,
            },
            None => Policy {
                cache: false,
                ..cached
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal::config::{Config, ProcessEnv};

    fn rules(toml: &str) -> Rules {
        let cfg = Config::parse(toml, "t.toml", &ProcessEnv).unwrap();
        Rules::new(cfg.rules, 1 << 20)
    }

    #[test]
    fn first_match_decides_and_unmatched_passes_through() {
        let r = rules(
            r#"
[[rules]]
pattern = "b/tmp/**"
cache = false
[[rules]]
pattern = "b/**"
page_size = "16MiB"
ttl = "1h"
list_ttl = "30s"
[[rules]]
pattern = "logs/*.txt"
"#,
        );
        assert!(!r.policy("b", "tmp/x/y").cache);
        let p = r.policy("b", "data/x");
        assert!(p.cache);
        assert_eq!(p.block_size, 16 << 20);
        assert_eq!(p.ttl, Some(Duration::from_secs(3600)));
        // A listing of a prefix is matched as bucket/prefix.
        assert_eq!(
            r.policy("b", "data/").list_ttl,
            Some(Duration::from_secs(30))
        );
        assert_eq!(r.policy("b", "").list_ttl, Some(Duration::from_secs(30)));
        assert_eq!(r.policy("logs", "").list_ttl, None);
        // `*` stays within one path segment; `**` crosses them.
        assert!(r.policy("logs", "a.txt").cache);
        assert!(!r.policy("logs", "d/a.txt").cache);
        assert!(!r.policy("other", "k").cache);
        assert!(rules("").policy("any", "key").cache);
    }
}
