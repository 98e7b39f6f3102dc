//! A null FUSE filesystem: one file, `zero`, of SIZE bytes of zeros, answered from
//! memory through the same kernel layer (this crate) and INIT settings as shoal-mount. Benchmarks
//! use it as the FUSE ceiling of this machine. `nullfs MOUNTPOINT SIZE_BYTES
//! [RING_MIB]` (foreground; SIGTERM or SIGINT unmounts). With RING_MIB, reads are
//! answered from a ring of that many MiB of bytes instead of one MiB of zeros that
//! stays in the CPU's cache: what replying with bytes not in cache costs.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use fusewire::{
    self as kernel, DirBuf, FileAttr, Filesystem, Header, ReplyAttr, ReplyData, ReplyDir,
    ReplyEmpty, ReplyEntry, ReplyOpen, Wants,
};

struct Null {
    size: u64,
    /// What reads are answered from: one MiB, or a ring of them.
    zeros: Bytes,
}

fn attr(ino: u64, size: u64) -> FileAttr {
    let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    FileAttr {
        ino,
        size,
        blocks: size.div_ceil(512),
        time: (t.as_secs(), 0),
        mode: if ino == 1 {
            libc::S_IFDIR | 0o555
        } else {
            libc::S_IFREG | 0o444
        },
        nlink: 1,
        uid: 0,
        gid: 0,
        blksize: 1 << 20,
    }
}

const TTL: Duration = Duration::from_secs(3600);

impl Filesystem for Null {
    fn lookup(&self, h: &Header, name: &[u8], reply: ReplyEntry) {
        if h.nodeid == 1 && name == b"zero" {
            reply.entry(&attr(2, self.size), TTL)
        } else {
            reply.error(libc::ENOENT)
        }
    }

    fn getattr(&self, h: &Header, reply: ReplyAttr) {
        let size = if h.nodeid == 1 { 0 } else { self.size };
        reply.attr(&attr(h.nodeid, size), TTL)
    }

    fn open(&self, _h: &Header, _flags: i32, reply: ReplyOpen) {
        reply.opened(1, fusewire::abi::fopen::KEEP_CACHE, None)
    }

    fn opendir(&self, _h: &Header, reply: ReplyOpen) {
        reply.opened(1, 0, None)
    }

    fn read(&self, _h: &Header, _fh: u64, offset: u64, size: u32, _direct: bool, reply: ReplyData) {
        let n = (size as u64).min(self.size.saturating_sub(offset)) as usize;
        // Where in the ring this read falls (always 0 for one MiB).
        let at = (offset % (self.zeros.len() as u64 - (1 << 20) + 1)) as usize;
        reply.data(&[self.zeros.slice(at..at + n.min(1 << 20))])
    }

    fn readdir(&self, _h: &Header, _fh: u64, offset: u64, size: u32, plus: bool, reply: ReplyDir) {
        let mut buf = DirBuf::new(size, plus);
        if offset == 0 {
            buf.push(1, "zero", &attr(2, self.size), TTL);
        }
        buf.send(reply)
    }

    fn flush(&self, _h: &Header, reply: ReplyEmpty) {
        reply.ok()
    }
}

/// What shoal-mount asks at INIT (`shoal_mount::fuse::wants`), so the two are
/// measured alike: reads of 1 MiB, read-ahead as large as the kernel grants.
fn wants() -> Wants {
    use fusewire::abi::init;
    Wants {
        flags: init::ASYNC_READ
            | init::DO_READDIRPLUS
            | init::READDIRPLUS_AUTO
            | init::PARALLEL_DIROPS
            | init::MAX_PAGES,
        max_readahead: 1 << 20,
        max_background: 64,
        congestion_threshold: 48,
        max_pages: 256,
    }
}

/// N zero bytes in pages of their own. `vec![0; n]` would leave them mapped to the
/// kernel's shared zero page until written, and a reply from such pages takes the
/// kernel's slow page-pinning path: measured on this machine, 20% more CPU per byte
/// than a reply from written memory, which is not the floor a benchmark wants.
fn written_zeros(n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    for page in v.chunks_mut(4096) {
        // Opaque to the optimizer, so the store (and the page fault) happens.
        page[0] = std::hint::black_box(0);
    }
    v
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(mnt), Some(size)) = (args.get(1), args.get(2).and_then(|s| s.parse().ok())) else {
        eprintln!("usage: nullfs MOUNTPOINT SIZE_BYTES [RING_MIB]");
        std::process::exit(2);
    };
    let zeros = match args.get(3).map(|s| s.parse::<usize>()) {
        None => Bytes::from(written_zeros(1 << 20)),
        Some(Ok(mib)) if mib >= 2 => Bytes::from(vec![1u8; mib << 20]),
        Some(_) => {
            eprintln!("nullfs: RING_MIB must be a number of MiB, 2 or more");
            std::process::exit(2);
        }
    };
    let mnt = Path::new(mnt);
    let opts = kernel::mount::MountOptions {
        fsname: "nullfs".into(),
        subtype: "nullfs".into(),
        allow_other: false,
    };
    let chan = Arc::new(kernel::Channel::new(kernel::mount::mount(mnt, &opts)?)?);
    kernel::handshake(&chan, &wants())?;
    let null = Arc::new(Null { size, zeros });
    let session = kernel::Running::start(chan, null, 4, false)?;
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
    kernel::mount::unmount(mnt, false).or_else(|_| kernel::mount::unmount(mnt, true))?;
    session.join();
    Ok(())
}
