//! The directory a control socket is made in. Whoever may write in it may put
//! their own socket in ours' place, and whoever may connect to the socket is
//! handed the mount's `/dev/fuse`: so the keeper's default directory is its
//! user's alone (0700, theirs, not a link), and a directory named for it must
//! at least be writable by nobody else.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum DirError {
    #[error("control socket directory {0}: {1}")]
    Io(PathBuf, io::Error),
    #[error("control socket directory {0} is a symbolic link, not a directory of ours; remove it")]
    Link(PathBuf),
    #[error("control socket directory {0} is not a directory")]
    NotDir(PathBuf),
    #[error(
        "control socket directory {path} belongs to uid {owner}, not to us (uid {us}): another user \
         may have made it first to take the mount's control; remove it, or name another with --control-socket"
    )]
    Owner { path: PathBuf, owner: u32, us: u32 },
    #[error(
        "control socket directory {0} may be written by other users (mode {1:o}, not sticky): they \
         could put their own socket in the mount's place; name another with --control-socket"
    )]
    Writable(PathBuf, u32),
}

/// This process's effective uid: the owner of what it creates.
pub fn euid() -> u32 {
    // SAFETY: a plain getter.
    unsafe { libc::geteuid() }
}

/// Makes `dir` (and missing parents) mode 0700, or checks the one there: a
/// directory (not a link) of ours, whose mode is tightened to 0700 if it was
/// looser (a directory an earlier version made).
pub fn private(dir: &Path) -> Result<(), DirError> {
    create(dir)?;
    let err = |e| DirError::Io(dir.to_owned(), e);
    let meta = std::fs::symlink_metadata(dir).map_err(err)?;
    if meta.file_type().is_symlink() {
        return Err(DirError::Link(dir.to_owned()));
    }
    if !meta.is_dir() {
        return Err(DirError::NotDir(dir.to_owned()));
    }
    if meta.uid() != euid() {
        return Err(DirError::Owner {
            path: dir.to_owned(),
            owner: meta.uid(),
            us: euid(),
        });
    }
    if meta.mode() & 0o7777 != 0o700 {
        tracing::warn!(
            "control socket directory {} had mode {:o}; making it 0700",
            dir.display(),
            meta.mode() & 0o7777
        );
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(err)?;
    }
    Ok(())
}

/// Makes `dir` 0700 if it is missing, or checks the one named: ours or root's,
/// and writable by no other user unless sticky (a `/tmp`, where nobody may
/// remove or rename what is ours).
pub fn named(dir: &Path) -> Result<(), DirError> {
    create(dir)?;
    let meta = std::fs::metadata(dir).map_err(|e| DirError::Io(dir.to_owned(), e))?;
    if !meta.is_dir() {
        return Err(DirError::NotDir(dir.to_owned()));
    }
    if meta.uid() != euid() && meta.uid() != 0 {
        return Err(DirError::Owner {
            path: dir.to_owned(),
            owner: meta.uid(),
            us: euid(),
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(DirError::Writable(dir.to_owned(), mode));
    }
    Ok(())
}

fn create(dir: &Path) -> Result<(), DirError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| DirError::Io(dir.to_owned(), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().mode() & 0o7777
    }

    fn chown(p: &Path, uid: u32) {
        std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
    }

    #[test]
    fn a_private_directory_is_made_0700() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("a/b");
        private(&d).unwrap();
        assert_eq!(mode(&d), 0o700);
        assert_eq!(
            mode(&t.path().join("a")),
            0o700,
            "parents made too are 0700"
        );
        // Again: the one there is fine.
        private(&d).unwrap();
    }

    #[test]
    fn a_private_directory_of_ours_with_a_loose_mode_is_tightened() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("d");
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        private(&d).unwrap();
        assert_eq!(mode(&d), 0o700);
    }

    #[test]
    fn a_private_directory_another_user_made_first_is_refused() {
        if euid() != 0 {
            eprintln!("skipped: needs root to give a directory away");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("d");
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        chown(&d, 65534);
        let e = private(&d).unwrap_err();
        assert!(matches!(e, DirError::Owner { owner: 65534, .. }), "{e}");
        // Named for the socket, another user's directory is refused too.
        let e = named(&d).unwrap_err();
        assert!(matches!(e, DirError::Owner { owner: 65534, .. }), "{e}");
    }

    #[test]
    fn a_link_in_place_of_the_private_directory_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let real = t.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(matches!(private(&link), Err(DirError::Link(_))));
    }

    #[test]
    fn a_named_directory_others_may_write_is_refused_unless_sticky() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("d");
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(named(&d), Err(DirError::Writable(_, 0o777))));
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        named(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        named(&d).unwrap();
        assert_eq!(mode(&d), 0o755, "a named directory is left as it is");
    }
}
