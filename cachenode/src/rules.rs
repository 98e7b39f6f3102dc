//! Caching rules: what the node does with each key, decided by the first rule whose
//! glob matches `bucket/key`. With no rules everything is cached at the node's
//! block size; with rules, a key that matches none passes through uncached (an
//! allowlist), and `shoal_node_uncached_requests_total` shows how often.
//!
//! Files of formats read in ranges (Parquet, ORC, Arrow, SQLite, HDF5, ...: a
//! footer or header, then the column chunks or pages a query needs) are cached
//! in pages of [`RANGE_PAGE`] unless a rule gives them a `page_size`: a cold
//! read of a few KiB, or of one column chunk, then costs the origin about what
//! it reads rather than a whole block around it.

use std::time::Duration;

use shoal::config::CacheRule;
use shoal::formats::read_in_ranges;

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

/// The page of a file read in ranges: small enough that a column chunk's two
/// ends and a footer cost little beside the chunk (a 1 MiB block around a
/// 16 KiB footer is 64x), large enough that a scan of such a file is not a
/// request per few KiB (a request for a whole block opens its pages at once).
pub const RANGE_PAGE: u64 = 64 << 10;

impl Rules {
    pub fn new(rules: Vec<CacheRule>, default_block: u64) -> Rules {
        Rules {
            rules,
            default_block,
        }
    }

    pub fn policy(&self, bucket: &str, key: &str) -> Policy {
        // Never past the node's block: pages must divide the cluster's blocks.
        let default_block = if read_in_ranges(key) {
            RANGE_PAGE.min(self.default_block)
        } else {
            self.default_block
        };
        let cached = Policy {
            cache: true,
            block_size: default_block,
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
                block_size: r.block_size.unwrap_or(default_block),
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

    #[test]
    fn files_read_in_ranges_are_cached_in_small_pages_unless_a_rule_says() {
        let none = rules("");
        assert_eq!(none.policy("b", "t/part-0.parquet").block_size, RANGE_PAGE);
        assert_eq!(none.policy("b", "x/DB.SQLITE").block_size, RANGE_PAGE);
        assert_eq!(none.policy("b", "x.bin").block_size, 1 << 20);
        assert_eq!(none.policy("b", "parquet/x.bin").block_size, 1 << 20);
        let r = rules(
            "[[rules]]\npattern = \"b/big/**\"\npage_size = \"1MiB\"\n\
             [[rules]]\npattern = \"b/**\"\n",
        );
        assert_eq!(r.policy("b", "big/t.parquet").block_size, 1 << 20);
        assert_eq!(r.policy("b", "small/t.parquet").block_size, RANGE_PAGE);
        // A node block smaller than a page is the page.
        let small = Rules::new(Vec::new(), 16 << 10);
        assert_eq!(small.policy("b", "t.parquet").block_size, 16 << 10);
    }
}
