//! A memory cgroup of a test's own, for the processes it starts: a child of the
//! test's cgroup, with a real limit the kernel enforces, and what the kernel
//! counted of them: the peak, the times the limit was met, the OOM kills.
//!
//! cgroup v2 where the memory controller is there (`memory.max`,
//! `memory.peak`, `memory.events`), else v1's memory hierarchy
//! (`memory.limit_in_bytes`, `memory.max_usage_in_bytes`, `memory.failcnt`,
//! `memory.oom_control`). Where neither can be made, [`MemCgroup::create`]
//! says why; under `CI=true` [`MemCgroup::required`] fails the test instead.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    V1,
    V2,
}

/// What the kernel counted of a cgroup's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemUse {
    /// The most it held at once (anonymous, page cache and kernel memory).
    pub peak: u64,
    /// What it holds now.
    pub now: u64,
    /// Times its usage met the limit (v1 `failcnt`, v2 `memory.events` max).
    pub hit_limit: u64,
    /// Processes the kernel's OOM killer killed in it.
    pub oom_kills: u64,
}

/// A child memory cgroup; removed on drop once its processes are gone.
pub struct MemCgroup {
    dir: PathBuf,
    version: CgroupVersion,
    limit: Option<u64>,
    /// `cgroup.procs`, open: a child writes `0` to it to join (see
    /// [`MemCgroup::join_on_exec`]).
    procs: std::fs::File,
}

static SERIAL: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn under_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

impl MemCgroup {
    /// A child of this process's memory cgroup named after `name`, held to
    /// `limit` bytes (none: only counted); `Err` says why none can be made.
    pub fn create(name: &str, limit: Option<u64>) -> Result<MemCgroup, String> {
        let (parent, version) = own_memory_cgroup()?;
        let n = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = parent.join(format!("{name}-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        let limit_file = match version {
            CgroupVersion::V1 => "memory.limit_in_bytes",
            CgroupVersion::V2 => "memory.max",
        };
        let set = |file: &str, value: &str| {
            std::fs::write(dir.join(file), value)
                .map_err(|e| format!("{}/{file} = {value}: {e}", dir.display()))
        };
        let made = (|| {
            if let Some(l) = limit {
                set(limit_file, &l.to_string())?;
                // No swap to hide in: the limit is on memory itself.
                match version {
                    CgroupVersion::V1 => {
                        set("memory.swappiness", "0")?;
                    }
                    CgroupVersion::V2 => {
                        let _ = set("memory.swap.max", "0");
                    }
                }
            }
            std::fs::OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))
                .map_err(|e| format!("{}/cgroup.procs: {e}", dir.display()))
        })();
        match made {
            Ok(procs) => Ok(MemCgroup {
                dir,
                version,
                limit,
                procs,
            }),
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                Err(e)
            }
        }
    }

    /// [`Self::create`], or `None` with the reason printed when the host has no
    /// memory cgroup to make one in; under `CI=true` that fails the test.
    pub fn required(name: &str, limit: Option<u64>) -> Option<MemCgroup> {
        match Self::create(name, limit) {
            Ok(c) => Some(c),
            Err(e) => {
                assert!(!under_ci(), "no memory cgroup under CI: {e}");
                eprintln!("skipped: no memory cgroup can be made here: {e}");
                None
            }
        }
    }

    pub fn version(&self) -> CgroupVersion {
        self.version
    }

    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Makes the process `cmd` starts join this cgroup before it runs (so all
    /// it allocates, and every process it starts, are counted here).
    pub fn join_on_exec(&self, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        let fd = self.procs.as_raw_fd();
        // SAFETY: only write(2) on a descriptor open for the child's whole
        // life: async-signal-safe, as pre_exec requires.
        unsafe {
            cmd.pre_exec(move || {
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// Processes in the cgroup now.
    pub fn pids(&self) -> Vec<u32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// What the kernel counted. Panics if the counters cannot be read: a
    /// memory check without them would pass on nothing.
    pub fn usage(&self) -> MemUse {
        let read = |f: &str| {
            std::fs::read_to_string(self.dir.join(f))
                .unwrap_or_else(|e| panic!("{}/{f}: {e}", self.dir.display()))
        };
        let number = |f: &str| -> u64 {
            let s = read(f);
            s.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{}/{f} is not a number: {s:?}", self.dir.display()))
        };
        let field = |f: &str, name: &str| -> u64 {
            keyed(&read(f), name)
                .unwrap_or_else(|| panic!("{}/{f} has no {name}", self.dir.display()))
        };
        match self.version {
            CgroupVersion::V1 => MemUse {
                peak: number("memory.max_usage_in_bytes"),
                now: number("memory.usage_in_bytes"),
                hit_limit: number("memory.failcnt"),
                oom_kills: field("memory.oom_control", "oom_kill"),
            },
            CgroupVersion::V2 => MemUse {
                peak: number("memory.peak"),
                now: number("memory.current"),
                hit_limit: field("memory.events", "max"),
                oom_kills: field("memory.events", "oom_kill"),
            },
        }
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        // Whoever started them stops them; what is left is killed, so the
        // cgroup can go.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pids = self.pids();
            if pids.is_empty() || Instant::now() > deadline {
                break;
            }
            for p in pids {
                // SAFETY: kill(2) with a pid and a signal.
                unsafe { libc::kill(p as i32, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        while std::fs::remove_dir(&self.dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The value of line `name N` of a flat-keyed cgroup file.
fn keyed(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok())?
    })
}

/// Where this process's memory cgroup is, and which version holds the memory
/// controller: v2 when its unified hierarchy has it, else v1's.
fn own_memory_cgroup() -> Result<(PathBuf, CgroupVersion), String> {
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    // mountinfo: id parent dev root mountpoint opts... - fstype source superopts
    let mount_of = |v2: bool| {
        mounts.lines().find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let f: Vec<&str> = pre.split(' ').collect();
            let p: Vec<&str> = post.split(' ').collect();
            let ok = match v2 {
                true => p.first() == Some(&"cgroup2"),
                false => {
                    p.first() == Some(&"cgroup")
                        && p.get(2)
                            .is_some_and(|o| o.split(',').any(|o| o == "memory"))
                }
            };
            ok.then(|| Some((f.get(3)?.to_string(), PathBuf::from(f.get(4)?))))?
        })
    };
    let place = |(root, at): (String, PathBuf), path: &str| {
        let rel = path.strip_prefix(root.as_str()).unwrap_or(path);
        at.join(rel.trim_start_matches('/'))
    };
    for line in own.lines() {
        let mut f = line.splitn(3, ':');
        let (_, ctrl, path) = (f.next(), f.next().unwrap_or(""), f.next().unwrap_or(""));
        if ctrl.is_empty() {
            if let Some(m) = mount_of(true) {
                let dir = place(m, path);
                let has = std::fs::read_to_string(dir.join("cgroup.controllers"))
                    .unwrap_or_default()
                    .split_whitespace()
                    .any(|c| c == "memory");
                if has {
                    return v2_parent(dir).map(|d| (d, CgroupVersion::V2));
                }
            }
        } else if ctrl.split(',').any(|c| c == "memory") {
            let m = mount_of(false).ok_or("no cgroup v1 memory hierarchy is mounted")?;
            return Ok((place(m, path), CgroupVersion::V1));
        }
    }
    Err("no memory controller: neither cgroup v2 with memory nor a v1 memory hierarchy".into())
}

/// Where a v2 child with the memory controller can be made under `own`: a
/// cgroup with processes cannot give its children controllers (v2's rule of no
/// internal processes), so the test's own cgroup must already delegate memory.
fn v2_parent(own: PathBuf) -> Result<PathBuf, String> {
    let sub = std::fs::read_to_string(own.join("cgroup.subtree_control")).unwrap_or_default();
    if sub.split_whitespace().any(|c| c == "memory") {
        return Ok(own);
    }
    match std::fs::write(own.join("cgroup.subtree_control"), "+memory") {
        Ok(()) => Ok(own),
        Err(e) => Err(format!(
            "{} does not delegate the memory controller to its children ({e}); run the test in a cgroup that does (systemd-run --user -p Delegate=yes, say)",
            own.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_keyed_files_are_read_by_name() {
        let f = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(keyed(f, "oom_kill"), Some(3));
        assert_eq!(keyed(f, "under_oom"), Some(0));
        assert_eq!(keyed(f, "oom"), None);
    }
}
