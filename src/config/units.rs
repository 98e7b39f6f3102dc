//! Sizes (`"1MiB"`) and durations (`"5s"`) as they are written in the config file.
//!
//! They parse while deserializing, so a bad value is reported with its key path.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// A byte count written as `"1MiB"`, `"512 KiB"`, `"10GB"` or a bare integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Size(pub u64);

impl Size {
    pub fn parse(s: &str) -> Result<Size, String> {
        let t = s.trim();
        if t.is_empty() {
            return Err("empty size".into());
        }
        if t.starts_with('-') {
            return Err(format!("size {s:?} is negative"));
        }
        t.parse::<bytesize::ByteSize>()
            .map(|b| Size(b.as_u64()))
            .map_err(|_| {
                format!("{s:?} is not a size (write it like \"64KiB\", \"1MiB\" or \"10GB\")")
            })
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a size such as \"1MiB\" or a number of bytes")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v)
                    .map(Size)
                    .map_err(|_| E::custom(format!("size {v} is negative")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Size, E> {
                Size::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A duration written as `"5s"`, `"250ms"`, `"1h 30m"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dur(pub Duration);

impl Dur {
    pub fn parse(s: &str) -> Result<Dur, String> {
        humantime::parse_duration(s.trim()).map(Dur).map_err(|e| {
            format!("{s:?} is not a duration ({e}; write it like \"250ms\", \"5s\" or \"1h\")")
        })
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as \"5s\" or \"250ms\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                Dur::parse(v).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                Err(E::custom(format!(
                    "{v} has no unit: write a duration as a string like \"{v}s\" or \"{v}ms\""
                )))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                self.visit_i64(v as i64)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(Size::parse("1MiB").unwrap().0, 1 << 20);
        assert_eq!(Size::parse("64 KiB").unwrap().0, 64 << 10);
        assert_eq!(Size::parse("1MB").unwrap().0, 1_000_000);
        assert_eq!(Size::parse("4096").unwrap().0, 4096);
        assert!(Size::parse("lots").is_err());
        assert!(Size::parse("-1MiB").is_err());
        assert!(Size::parse("").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(Dur::parse("5s").unwrap().0, Duration::from_secs(5));
        assert_eq!(Dur::parse("250ms").unwrap().0, Duration::from_millis(250));
        assert!(Dur::parse("5").is_err());
        assert!(Dur::parse("soon").is_err());
    }
}
