//! `--token-group GID`: the mount joins the group its volume's token files
//! belong to, alone, and gives up changing groups again. A CSI driver's unit
//! cannot be given a group the host's group database does not know (systemd's
//! `SupplementaryGroups=` looks it up), so the mount joins it itself, with the
//! `CAP_SETGID` its unit keeps for that, then drops `CAP_SETGID` and
//! `CAP_SETPCAP` from its bounding set: its servers, started after, never have
//! them. With no capability that reads past a file's mode, the mount reads its
//! own volume's tokens and no other's.

/// Capability numbers (linux/capability.h).
const CAP_SETGID: libc::c_ulong = 6;
const CAP_SETPCAP: libc::c_ulong = 8;

/// Joins `gid` (unless this process is in it alone already: a server of a
/// keeper that joined) and drops the capabilities to change it.
pub fn join(gid: u32) -> Result<(), String> {
    // SAFETY: getgroups with a buffer of the size passed.
    let mut now = [0 as libc::gid_t; 2];
    let n = unsafe { libc::getgroups(now.len() as i32, now.as_mut_ptr()) };
    if n == 1 && now[0] == gid {
        return Ok(());
    }
    let groups = [gid as libc::gid_t];
    // SAFETY: one group from a valid array.
    if unsafe { libc::setgroups(1, groups.as_ptr()) } != 0 {
        return Err(format!(
            "--token-group {gid}: cannot join it: {}",
            std::io::Error::last_os_error()
        ));
    }
    for cap in [CAP_SETGID, CAP_SETPCAP] {
        // SAFETY: prctl with plain arguments. EINVAL: a capability this kernel
        // does not know; EPERM: one already gone without CAP_SETPCAP.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            let e = std::io::Error::last_os_error();
            if
            // SAFETY: as above.
            unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) } == 1 {
                return Err(format!(
                    "--token-group {gid}: cannot give up capability {cap}: {e}"
                ));
            }
        }
    }
    Ok(())
}
