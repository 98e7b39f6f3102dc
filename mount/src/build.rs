//! Which build of `shoal-mount` a process runs: the crate's version and a digest
//! of the executable itself (xxh3-64 of its bytes), written `0.1.0+3fa2…`. Two
//! builds of one version differ in their digest, so a CSI driver can tell a
//! mount served by the binary it ships from one served by any other (an older
//! release, a rebuild, a rollback) and hand it over ([`crate::keeper`]).

use std::io::Read;
use std::path::Path;
use std::sync::OnceLock;

/// This crate's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The digest of the executable at `path` (or `/proc/PID/exe`: the file a
/// process runs, even once replaced on disk), 16 hex digits.
pub fn digest_of(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(format!("{:016x}", h.digest()))
}

/// `VERSION+DIGEST` of this process's own executable (`VERSION` alone if it
/// cannot be read).
pub fn this() -> &'static str {
    static THIS: OnceLock<String> = OnceLock::new();
    THIS.get_or_init(|| match digest_of(Path::new("/proc/self/exe")) {
        Ok(d) => format!("{VERSION}+{d}"),
        Err(_) => VERSION.to_owned(),
    })
}

/// The digest part of a `VERSION+DIGEST` string.
pub fn digest_part(version: &str) -> Option<&str> {
    version.split_once('+').map(|(_, d)| d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_is_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, vec![7u8; 3 << 20]).unwrap();
        std::fs::write(&b, vec![7u8; 3 << 20]).unwrap();
        assert_eq!(digest_of(&a).unwrap(), digest_of(&b).unwrap());
        std::fs::OpenOptions::new()
            .append(true)
            .open(&b)
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"x"))
            .unwrap();
        assert_ne!(digest_of(&a).unwrap(), digest_of(&b).unwrap());
        assert_eq!(digest_of(&a).unwrap().len(), 16);
        let me = this();
        assert!(me.starts_with(VERSION), "{me}");
        assert_eq!(
            digest_part(me),
            Some(digest_of(Path::new("/proc/self/exe")).unwrap().as_str())
        );
    }
}
