//! Making and ending the kernel mount: `/dev/fuse` opened and mounted on the
//! mountpoint with `mount(2)` where this process may (root, or `CAP_SYS_ADMIN`),
//! else through `fusermount3`, which mounts and hands the descriptor back over a
//! socket (`_FUSE_COMMFD`).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;

/// How the mount shows in `/proc/mounts` and who may use it.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// The mount's source, as `df` and `mount` show it (`shoal:bucket/prefix`).
    pub fsname: String,
    /// The filesystem's type after `fuse.`, as `mount -t fuse.SUBTYPE` names it.
    pub subtype: String,
    pub allow_other: bool,
}

/// Mounts a new FUSE connection on `target`; returns its device descriptor.
pub fn mount(target: &Path, o: &MountOptions) -> io::Result<OwnedFd> {
    match mount_direct(target, o) {
        Ok(fd) => Ok(fd),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => mount_helper(target, o),
        Err(e) => Err(e),
    }
}

fn mount_direct(target: &Path, o: &MountOptions) -> io::Result<OwnedFd> {
    let dev: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")?
        .into();
    // SAFETY: plain getters.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut data = format!(
        "fd={},rootmode=40000,user_id={uid},group_id={gid},default_permissions",
        dev.as_raw_fd()
    );
    if o.allow_other {
        data.push_str(",allow_other");
    }
    let c = |s: &[u8]| CString::new(s).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput));
    let (src, tgt, fstype, data) = (
        c(o.fsname.as_bytes())?,
        c(target.as_os_str().as_bytes())?,
        c(format!("fuse.{}", o.subtype).as_bytes())?,
        c(data.as_bytes())?,
    );
    let flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOATIME;
    // SAFETY: NUL-terminated strings that outlive the call.
    let r = unsafe {
        libc::mount(
            src.as_ptr(),
            tgt.as_ptr(),
            fstype.as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(dev)
}

fn mount_helper(target: &Path, o: &MountOptions) -> io::Result<OwnedFd> {
    let (ours, theirs) = UnixStream::pair()?;
    // The helper inherits its end.
    // SAFETY: clearing FD_CLOEXEC on a descriptor we own.
    unsafe { libc::fcntl(theirs.as_raw_fd(), libc::F_SETFD, 0) };
    let mut opts = format!(
        "ro,nosuid,nodev,noatime,default_permissions,subtype={},fsname={}",
        o.subtype.replace(',', "_"),
        o.fsname.replace(',', "_")
    );
    if o.allow_other {
        opts.push_str(",allow_other");
    }
    let status = Command::new("fusermount3")
        .arg("-o")
        .arg(&opts)
        .arg("--")
        .arg(target)
        .env("_FUSE_COMMFD", theirs.as_raw_fd().to_string())
        .status()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot run fusermount3: {e}")))?;
    drop(theirs);
    if !status.success() {
        return Err(io::Error::other(format!("fusermount3 failed ({status})")));
    }
    receive_fd(&ours)
}

/// Receives one descriptor sent with `SCM_RIGHTS` on `sock`.
pub fn receive_fd(sock: &UnixStream) -> io::Result<OwnedFd> {
    receive_fds(sock)?
        .into_iter()
        .next()
        .ok_or_else(|| io::Error::other("no descriptor came with the message"))
}

/// Receives the descriptors sent with one `SCM_RIGHTS` message on `sock`.
pub fn receive_fds(sock: &UnixStream) -> io::Result<Vec<OwnedFd>> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut byte = [0u8; 1];
    let mut iov = [io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 4]);
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(io::Error::from)?;
    let mut out = Vec::new();
    for c in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            // SAFETY: the kernel just gave us these descriptors.
            out.extend(
                fds.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    Ok(out)
}

/// Sends `fds` with one byte of `tag` over `sock` (`SCM_RIGHTS`).
pub fn send_fds(sock: &UnixStream, tag: u8, fds: &[std::os::fd::RawFd]) -> io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let byte = [tag];
    let iov = [io::IoSlice::new(&byte)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    sendmsg::<()>(sock.as_raw_fd(), &iov, &cmsg, MsgFlags::empty(), None)
        .map(drop)
        .map_err(io::Error::from)
}

/// Ends the mount on `target`; `lazy` detaches it even while busy.
pub fn unmount(target: &Path, lazy: bool) -> io::Result<()> {
    let tgt = CString::new(target.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::umount2(tgt.as_ptr(), flags) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EPERM) {
        return Err(e);
    }
    let status = Command::new("fusermount3")
        .arg(if lazy { "-uz" } else { "-u" })
        .arg(target)
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "fusermount3 -u failed ({status})"
        )))
    }
}
