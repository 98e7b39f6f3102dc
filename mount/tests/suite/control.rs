//! The keeper's control socket hands out the mount's `/dev/fuse` (`fds`): only
//! the keeper's own user and root are answered, whatever the socket's mode, and
//! it is not made in a directory another user owns.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crate::common::*;

/// Connects to the socket in `argv[1]`, sends `argv[2]`, and prints how many
/// descriptors came with the answer, then the answer.
const ASK: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
try:
    s.sendall(sys.argv[2].encode() + b"\n")
except BrokenPipeError:
    pass  # refused before it asked: the refusal is there to read
msg, fds, _, _ = socket.recv_fds(s, 4096, 4)
print(len(fds), msg.decode(errors="replace").strip())
"#;

/// [`ASK`] run as `uid` (and its group); its output.
fn ask_as(uid: u32, socket: &Path, cmd: &str) -> String {
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            "--clear-groups",
            // The system's Python: another user may not enter root's home.
            "/usr/bin/python3",
            "-c",
            ASK,
        ])
        .arg(socket)
        .arg(cmd)
        .output()
        .expect("setpriv");
    assert!(
        out.status.success(),
        "the client as uid {uid} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn set_mode(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_user_is_refused_by_the_control_socket() {
    let o = origin().await;
    o.put(BUCKET, "c/f", data(1000, 7));
    let dir = tempfile::tempdir().unwrap();
    // A directory other users may enter (root's, not writable by them: allowed
    // for a named socket).
    set_mode(dir.path(), 0o755);
    let socket = dir.path().join("control.sock");
    let m = Mount::start(
        &mount_toml(&o, &[], ""),
        BUCKET,
        &["--control-socket", socket.to_str().unwrap()],
    );
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the socket is its user's alone");
    // As a loose umask would have left it: anyone may connect. The keeper's
    // own check must still refuse them.
    set_mode(&socket, 0o666);

    let fds = ask_as(65534, &socket, "fds");
    assert!(
        fds.starts_with("0 error refused"),
        "uid 65534 gets no descriptors, and is told why: {fds}"
    );
    let status = ask_as(65534, &socket, "status");
    assert!(
        status.starts_with("0 error refused"),
        "nor the status: {status}"
    );
    let unmount = ask_as(65534, &socket, "unmount");
    assert!(unmount.starts_with("0 error refused"), "{unmount}");
    assert!(m.is_mounted(), "another user cannot unmount it");

    // Root (this keeper's user) still may.
    let root = ask_as(0, &socket, "fds");
    assert!(
        root.starts_with("2 "),
        "root gets the device and journal: {root}"
    );
    let (dev, journal) = shoal_mount::keeper::ask_fds(&socket).expect("fds for its own user");
    drop((dev, journal));
    assert_eq!(
        std::fs::read(m.path("c/f")).unwrap(),
        data(1000, 7),
        "the mount serves on"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_directory_another_user_made_is_refused() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("mount.toml");
    std::fs::write(&cfg, mount_toml(&o, &[], "")).unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    // Made first by another user, as /tmp/shoal-mount-UID could be.
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    set_mode(&theirs, 0o700);
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    // And one anyone may write in.
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    set_mode(&open, 0o777);
    for (d, why) in [
        (&theirs, "belongs to uid 65534"),
        (&open, "written by other users"),
    ] {
        let out = tokio::task::spawn_blocking({
            let (cfg, mnt, sock) = (cfg.clone(), mnt.clone(), d.join("control.sock"));
            move || {
                Command::new(MOUNT)
                    .arg("--config")
                    .arg(&cfg)
                    .arg("--foreground")
                    .arg("--control-socket")
                    .arg(&sock)
                    .arg(BUCKET)
                    .arg(&mnt)
                    .output()
                    .unwrap()
            }
        })
        .await
        .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{}: the keeper refuses to start",
            d.display()
        );
        assert!(err.contains(why), "{}: says why: {err}", d.display());
        assert!(!is_mounted(&mnt), "nothing is mounted");
        assert!(!d.join("control.sock").exists(), "no socket is made");
    }
}
