//! A null FUSE filesystem: one file, `zero`, of SIZE bytes of zeros, answered from
//! memory with the same kernel settings as shoal-mount. Benchmarks use it as the
//! FUSE ceiling of this machine. `nullfs MOUNTPOINT SIZE_BYTES` (foreground;
//! SIGTERM or SIGINT unmounts).

use std::ffi::OsStr;
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEntry, ReplyOpen, Request,
};

struct Null {
    size: u64,
    zeros: Vec<u8>,
}

fn attr(ino: u64, size: u64) -> FileAttr {
    let t = SystemTime::now();
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        kind: if ino == 1 {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: if ino == 1 { 0o555 } else { 0o444 },
        nlink: 1,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 1 << 20,
        flags: 0,
    }
}

const TTL: Duration = Duration::from_secs(3600);

impl Filesystem for Null {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(1 << 20);
        Ok(())
    }
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent.0 == 1 && name == "zero" {
            reply.entry(&TTL, &attr(2, self.size), Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }
    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        reply.attr(&TTL, &attr(ino.0, if ino.0 == 1 { 0 } else { self.size }));
    }
    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(1), FopenFlags::FOPEN_KEEP_CACHE);
    }
    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let n = (size as u64).min(self.size.saturating_sub(offset)) as usize;
        reply.data(&self.zeros[..n.min(self.zeros.len())]);
    }
    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if offset == 0 {
            let _ = reply.add(INodeNo(2), 1, FileType::RegularFile, "zero");
        }
        reply.ok();
    }
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(mnt), Some(size)) = (args.get(1), args.get(2).and_then(|s| s.parse().ok())) else {
        eprintln!("usage: nullfs MOUNTPOINT SIZE_BYTES");
        std::process::exit(2);
    };
    let mut cfg = fuser::Config::default();
    cfg.mount_options = vec![
        fuser::MountOption::RO,
        fuser::MountOption::FSName("nullfs".into()),
    ];
    cfg.n_threads = Some(4);
    let session = fuser::spawn_mount(
        Null {
            size,
            zeros: vec![0; 1 << 20],
        },
        mnt,
        &cfg,
    )?;
    // Same read-ahead as shoal-mount raises to.
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(mnt)?.dev();
    let _ = std::fs::write(
        format!(
            "/sys/class/bdi/{}:{}/read_ahead_kb",
            libc::major(dev),
            libc::minor(dev)
        ),
        "8192",
    );
    println!("ready");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    });
    session.umount_and_join()
}
