//! Open files: a node holds a socket per client connection and a mount one per
//! node connection, so the soft limit (often 1024) is raised to the hard one at
//! start, as servers do.

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit; returns the
/// limit now in force.
pub fn raise() -> std::io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if lim.rlim_cur < lim.rlim_max {
        let want = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        lim.rlim_cur = lim.rlim_max;
    }
    Ok(lim.rlim_cur)
}
