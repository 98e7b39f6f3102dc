//! The config's sections and keys, read from the raw structs themselves, and
//! what the file parser takes for one key.

use serde::de::{self, Deserialize, Deserializer, Visitor};
use shoal::config::raw::{
    RawAuth, RawAuthKey, RawCache, RawCluster, RawCredentials, RawGateway, RawMetrics, RawMount,
    RawNode, RawNodeFull, RawOrigin, RawRule, RawTls,
};

/// The field names a derived `Deserialize` asks for: it names them all when it
/// asks for a struct, which is all this deserializer answers before it stops.
pub fn fields_of<'de, T: Deserialize<'de>>() -> Vec<&'static str> {
    struct Fields<'a>(&'a mut Vec<&'static str>);
    impl<'de> Deserializer<'de> for Fields<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("only a struct is read"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            self.0.extend_from_slice(fields);
            Err(de::Error::custom("fields read"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map enum identifier ignored_any
        }
    }
    let mut out = Vec::new();
    let _ = T::deserialize(Fields(&mut out));
    assert!(
        !out.is_empty(),
        "no fields read from {}",
        std::any::type_name::<T>()
    );
    out
}

/// How a section is written in a file.
#[derive(Clone, Copy, PartialEq)]
pub enum Shape {
    /// `[a.b]`
    Table,
    /// `[[a.b]]`
    Array,
    /// An inline table in `[cluster] nodes = [...]`.
    NodeEntry,
}

/// Every section of the file: its name on the page, how it is written, its keys.
pub fn sections() -> Vec<(&'static str, Shape, Vec<&'static str>)> {
    use Shape::*;
    vec![
        ("origin", Table, fields_of::<RawOrigin>()),
        ("origin.credentials", Table, fields_of::<RawCredentials>()),
        ("cluster", Table, fields_of::<RawCluster>()),
        ("cluster.nodes", NodeEntry, fields_of::<RawNodeFull>()),
        ("cluster.credentials", Table, fields_of::<RawCredentials>()),
        ("cache", Table, fields_of::<RawCache>()),
        ("node", Table, fields_of::<RawNode>()),
        ("mount", Table, fields_of::<RawMount>()),
        ("auth", Table, fields_of::<RawAuth>()),
        ("auth.keys", Array, fields_of::<RawAuthKey>()),
        ("tls", Table, fields_of::<RawTls>()),
        ("metrics", Table, fields_of::<RawMetrics>()),
        ("gateway", Table, fields_of::<RawGateway>()),
        ("rules", Array, fields_of::<RawRule>()),
    ]
}

pub fn shape_of(section: &str) -> Shape {
    sections()
        .into_iter()
        .find(|(s, _, _)| *s == section)
        .map(|(_, shape, _)| shape)
        .unwrap_or(Shape::Table)
}
