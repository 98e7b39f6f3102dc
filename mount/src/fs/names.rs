//! Which S3 key segments can be POSIX file names.

/// Why `name` (one path segment) cannot be a file name, if it cannot.
pub fn problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("empty segment")
    } else if name == "." || name == ".." {
        Some("\".\" or \"..\"")
    } else if name.len() > 255 {
        Some("longer than 255 bytes")
    } else if name.contains('\0') {
        Some("contains NUL")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::problem;

    #[test]
    fn names() {
        assert!(problem("ok name ü").is_none());
        assert!(problem("").is_some());
        assert!(problem(".").is_some());
        assert!(problem("..").is_some());
        assert!(problem(&"x".repeat(256)).is_some());
        assert!(problem(&"x".repeat(255)).is_none());
        assert!(problem("a\0b").is_some());
    }
}
