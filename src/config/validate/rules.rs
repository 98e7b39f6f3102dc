//! `[[rules]]`: ordered globs on `bucket/key` and what each caches.

use crate::config::raw::RawRule;
use crate::config::CacheRule;

use super::{Validator, R};

impl Validator<'_> {
    pub(super) fn rule(&self, i: usize, r: RawRule) -> R<CacheRule> {
        let key = |k: &str| format!("rules[{i}].{k}");
        let pattern = r.pattern.ok_or_else(|| {
            self.err(
                key("pattern"),
                "every rule needs a pattern (a glob on bucket/key)",
            )
        })?;
        let matcher = globset::GlobBuilder::new(&pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| {
                self.err(
                    key("pattern"),
                    format!("{pattern:?} is not a glob: {}", e.kind()),
                )
            })?
            .compile_matcher();
        if r.block_size.is_some() && r.page_size.is_some() {
            return Err(self.err(key("page_size"), "write block_size or page_size, not both"));
        }
        let block_size = r.block_size.or(r.page_size).map(|s| s.0);
        if let Some(bs) = block_size {
            if !(4096..=(64 << 20)).contains(&bs) {
                return Err(self.err(
                    key(if r.page_size.is_some() {
                        "page_size"
                    } else {
                        "block_size"
                    }),
                    format!("{bs} is out of range 4KiB..=64MiB"),
                ));
            }
        }
        let cache = r.cache.unwrap_or(true);
        let pin = r.pin.unwrap_or(false);
        if !cache && (block_size.is_some() || r.ttl.is_some() || r.list_ttl.is_some() || pin) {
            return Err(self.err(
                key("cache"),
                "a rule with cache = false caches nothing: block_size, ttl, list_ttl and pin do not apply",
            ));
        }
        let ttl = r.ttl.map(|d| self.positive(&key("ttl"), d.0)).transpose()?;
        let list_ttl = r
            .list_ttl
            .map(|d| self.positive(&key("list_ttl"), d.0))
            .transpose()?;
        Ok(CacheRule {
            pattern,
            matcher,
            cache,
            block_size,
            ttl,
            list_ttl,
            pin,
        })
    }
}
