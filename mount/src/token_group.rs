//! `--token-group GID`: the mount joins the group its volume's token files
//! belong to, alone, and gives up changing groups again. A CSI driver's unit
//! cannot be given a group the host's group database does not know (systemd's
//! `SupplementaryGroups=` looks it up), so the mount joins it itself, with the
//! `CAP_SETGID` its unit keeps for that, then drops `CAP_SETGID` and
//! `CAP_SETPCAP` from every set it has: the bounding set (so that its servers,
//! started after, never have them) and its own effective and permitted ones (so
//! that the keeper, which stays, cannot join another group either). With no
//! capability that reads past a file's mode, the mount reads its own volume's
//! tokens and no other's.

use std::io::Error;

/// Capability numbers (linux/capability.h).
const CAP_SETGID: u32 = 6;
const CAP_SETPCAP: u32 = 8;
const GIVEN_UP: [u32; 2] = [CAP_SETGID, CAP_SETPCAP];

/// Joins `gid` (unless this process is in it alone already: a server of a
/// keeper that joined) and drops the capabilities to change it.
pub fn join(gid: u32) -> Result<(), String> {
    let mut now = [0 as libc::gid_t; 2];
    // SAFETY: getgroups with a buffer of the size passed.
    let n = unsafe { libc::getgroups(now.len() as i32, now.as_mut_ptr()) };
    if n == 1 && now[0] == gid {
        return Ok(());
    }
    let groups = [gid as libc::gid_t];
    // SAFETY: one group from a valid array.
    if unsafe { libc::setgroups(1, groups.as_ptr()) } != 0 {
        return Err(format!(
            "--token-group {gid}: cannot join it: {}",
            Error::last_os_error()
        ));
    }
    give_up().map_err(|e| format!("--token-group {gid}: {e}"))
}

/// Drops [`GIVEN_UP`] from the bounding set (first: that takes `CAP_SETPCAP`),
/// then from the effective, permitted and inheritable sets.
fn give_up() -> Result<(), String> {
    for cap in GIVEN_UP {
        // SAFETY: prctl with plain arguments. EINVAL: a capability this kernel
        // does not know; EPERM: one already gone without CAP_SETPCAP.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } != 0 {
            let e = Error::last_os_error();
            // SAFETY: as above.
            if unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong, 0, 0, 0) } == 1 {
                return Err(format!("cannot give up capability {cap}: {e}"));
            }
        }
    }
    let mut sets = capget().map_err(|e| format!("cannot read its capabilities: {e}"))?;
    for cap in GIVEN_UP {
        let (word, bit) = ((cap / 32) as usize, 1u32 << (cap % 32));
        sets[word].effective &= !bit;
        sets[word].permitted &= !bit;
        sets[word].inheritable &= !bit;
    }
    capset(&sets).map_err(|e| format!("cannot give up capabilities {GIVEN_UP:?}: {e}"))
}

/// `struct __user_cap_header_struct`, version 3 (64 capabilities in 2 words).
#[repr(C)]
struct Header {
    version: u32,
    pid: libc::c_int,
}
const VERSION_3: u32 = 0x2008_0522;

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Sets {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

fn capget() -> std::io::Result<[Sets; 2]> {
    let mut h = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut sets = [Sets::default(); 2];
    // SAFETY: a version 3 header and the two words it reads into.
    if unsafe { libc::syscall(libc::SYS_capget, &mut h, sets.as_mut_ptr()) } != 0 {
        return Err(Error::last_os_error());
    }
    Ok(sets)
}

fn capset(sets: &[Sets; 2]) -> std::io::Result<()> {
    let mut h = Header {
        version: VERSION_3,
        pid: 0,
    };
    // SAFETY: a version 3 header and the two words it writes from.
    if unsafe { libc::syscall(libc::SYS_capset, &mut h, sets.as_ptr()) } != 0 {
        return Err(Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a child process (this one's groups and capabilities stay): root joins
    /// the group and can then neither change its groups nor has the two
    /// capabilities anywhere; anyone else is refused with why.
    #[test]
    fn a_mount_joins_its_group_alone_and_cannot_change_groups_after() {
        let gid = 3_999_999;
        // SAFETY: the child makes system calls only, and ends with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", Error::last_os_error());
        if pid == 0 {
            let code = match join(gid) {
                Err(_) if unsafe { libc::geteuid() } != 0 => 0,
                Err(_) => 10,
                Ok(()) => {
                    let mut now = [0 as libc::gid_t; 2];
                    let n = unsafe { libc::getgroups(2, now.as_mut_ptr()) };
                    let other = [gid + 1];
                    let sets = capget().unwrap_or(
                        [Sets {
                            effective: u32::MAX,
                            ..Sets::default()
                        }; 2],
                    );
                    let held = |c: u32| {
                        sets[0].effective & (1 << c) != 0 || sets[0].permitted & (1 << c) != 0
                    };
                    let bounded = |c: u32| unsafe { libc::prctl(libc::PR_CAPBSET_READ, c as libc::c_ulong, 0, 0, 0) } != 0;
                    if n != 1 || now[0] != gid {
                        11
                    } else if unsafe { libc::setgroups(1, other.as_ptr()) } == 0 {
                        12
                    } else if GIVEN_UP.iter().any(|c| held(*c) || bounded(*c)) {
                        13
                    } else if join(gid).is_err() {
                        14 // a server of the keeper: already in it alone
                    } else {
                        0
                    }
                }
            };
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "{status}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "see the codes above");
    }
}
