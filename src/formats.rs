//! Files of formats read in ranges (Parquet, ORC, Arrow, SQLite, HDF5, ...): a
//! reader of one reads a footer or header, then the column chunks or pages a
//! query needs, each in one read of its own size. Nodes cache them in small
//! pages; a mount passes their reads on as the reader made them, never reading
//! ahead past one.

/// Names of formats read in ranges, by their endings (lower case).
const RANGE_FORMATS: &[&str] = &[
    ".parquet", ".parq", ".orc", ".arrow", ".feather", ".ipc", ".lance", ".sqlite", ".sqlite3",
    ".db", ".duckdb", ".h5", ".hdf5", ".he5", ".nc", ".nc4",
];

/// Whether `key` names a file of a format read in ranges.
pub fn read_in_ranges(key: &str) -> bool {
    let name = key.rsplit('/').next().unwrap_or(key);
    let name = name.to_ascii_lowercase();
    RANGE_FORMATS.iter().any(|s| name.ends_with(s))
}

#[cfg(test)]
mod tests {
    use super::read_in_ranges;

    #[test]
    fn formats_are_known_by_the_name_not_the_path() {
        assert!(read_in_ranges("t/part-0.parquet"));
        assert!(read_in_ranges("x/DB.SQLITE"));
        assert!(!read_in_ranges("x.bin"));
        assert!(!read_in_ranges("parquet/x.bin"));
        assert!(!read_in_ranges("x.parquet/part"));
    }
}
