//! Putting the image's `shoal-mount` on the host, for the host's systemd to run
//! (`shoal-csi --install-mount DIR`, the DaemonSet's init container). The image
//! holds no shell or coreutils, so the plugin's binary does the copy.
//!
//! The copy is written beside its destination and renamed over it: a mount
//! running the old binary keeps its file (a write into a running executable
//! would fail with `ETXTBSY`, a truncation would break it), and a host never
//! sees half a binary.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The file name installed, and the one `--mount-bin` then names in `DIR`.
pub const MOUNT_BIN: &str = "shoal-mount";

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("--install-mount {0}: not an absolute path")]
    NotAbsolute(PathBuf),
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
}

/// Copies `from` to `dir/shoal-mount` (mode 0755) through a temporary file in
/// `dir`, creating `dir`; the path installed.
pub fn install(from: &Path, dir: &Path) -> Result<PathBuf, InstallError> {
    if !dir.is_absolute() {
        return Err(InstallError::NotAbsolute(dir.to_owned()));
    }
    let io = |p: &Path| {
        let p = p.to_owned();
        move |e| InstallError::Io(p, e)
    };
    fs::create_dir_all(dir).map_err(io(dir))?;
    let bytes = fs::read(from).map_err(io(from))?;
    let dest = dir.join(MOUNT_BIN);
    let tmp = dir.join(format!(".{MOUNT_BIN}.{}", std::process::id()));
    let written = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.set_permissions(fs::Permissions::from_mode(0o755))?;
        f.sync_all()
    })();
    if let Err(e) = written.and_then(|()| fs::rename(&tmp, &dest)) {
        let _ = fs::remove_file(&tmp);
        return Err(InstallError::Io(dest, e));
    }
    // The rename is durable once the directory is.
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(dest)
}

/// The `shoal-mount` an image ships: beside this binary.
pub fn image_mount_bin() -> Result<PathBuf, InstallError> {
    let exe = std::env::current_exe().map_err(|e| InstallError::Io("/proc/self/exe".into(), e))?;
    Ok(exe.with_file_name(MOUNT_BIN))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn installs_by_rename_keeping_the_old_file_for_whoever_runs_it() {
        let tmp = tempfile::tempdir().unwrap();
        let (v1, v2) = (tmp.path().join("v1"), tmp.path().join("v2"));
        fs::write(&v1, b"version one").unwrap();
        fs::write(&v2, b"version two, longer").unwrap();
        let dir = tmp.path().join("opt/csi/shoal");

        let dest = install(&v1, &dir).unwrap();
        assert_eq!(dest, dir.join("shoal-mount"));
        assert_eq!(fs::read(&dest).unwrap(), b"version one");
        assert_eq!(fs::metadata(&dest).unwrap().mode() & 0o777, 0o755);
        // A mount running the old binary holds it open.
        let running = fs::File::open(&dest).unwrap();
        let old_inode = running.metadata().unwrap().ino();

        install(&v2, &dir).unwrap();
        assert_eq!(fs::read(&dest).unwrap(), b"version two, longer");
        assert_ne!(
            fs::metadata(&dest).unwrap().ino(),
            old_inode,
            "a new file, not a rewrite"
        );
        let mut kept = Vec::new();
        std::io::Read::read_to_end(&mut &running, &mut kept).unwrap();
        assert_eq!(kept, b"version one", "the running file is untouched");
        let left: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["shoal-mount"], "no temporary file left");
    }

    #[test]
    fn refuses_a_relative_directory_and_names_what_is_missing() {
        let tmp = tempfile::tempdir().unwrap();
        let e = install(Path::new("/nonexistent/shoal-mount"), Path::new("opt/csi")).unwrap_err();
        assert!(matches!(e, InstallError::NotAbsolute(_)), "{e}");

        let dir = tmp.path().join("bin");
        let e = install(&tmp.path().join("missing"), &dir).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
        assert!(!dir.join(MOUNT_BIN).exists());
    }
}
