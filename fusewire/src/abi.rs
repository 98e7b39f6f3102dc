//! The FUSE wire format (Linux `include/uapi/linux/fuse.h`, protocol 7.40), as far
//! as a read-only filesystem speaks it: opcodes, flags, and the fixed-size
//! structures, read from and written to byte buffers in the host's byte order.

/// The protocol this mount speaks; the kernel's INIT says what it speaks.
pub const MAJOR: u32 = 7;
pub const MINOR: u32 = 40;
/// The oldest minor version whose structure sizes this file writes (7.31: the
/// sizes of `fuse_attr`, `fuse_init_out` and the rest as below).
pub const MIN_MINOR: u32 = 31;

pub const IN_HEADER: usize = 40;
pub const OUT_HEADER: usize = 16;

pub mod op {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const ACCESS: u32 = 34;
    pub const INTERRUPT: u32 = 36;
    pub const DESTROY: u32 = 38;
    pub const BATCH_FORGET: u32 = 42;
    pub const READDIRPLUS: u32 = 44;
    /// Everything that would change the filesystem: read-only, `EROFS`
    /// (SETATTR, SYMLINK, MKNOD, MKDIR, UNLINK, RMDIR, RENAME, LINK, WRITE,
    /// SETXATTR, REMOVEXATTR, CREATE, FALLOCATE, RENAME2, COPY_FILE_RANGE,
    /// TMPFILE).
    pub const WRITES: &[u32] = &[4, 6, 8, 9, 10, 11, 12, 13, 16, 21, 24, 35, 43, 45, 47, 51];
}

/// INIT flags (`flags | flags2 << 32`).
pub mod init {
    pub const ASYNC_READ: u64 = 1 << 0;
    pub const DO_READDIRPLUS: u64 = 1 << 13;
    pub const ASYNC_DIO: u64 = 1 << 15;
    pub const READDIRPLUS_AUTO: u64 = 1 << 14;
    pub const PARALLEL_DIROPS: u64 = 1 << 18;
    pub const MAX_PAGES: u64 = 1 << 22;
    pub const INIT_EXT: u64 = 1 << 30;
    pub const DIRECT_IO_ALLOW_MMAP: u64 = 1 << 36;
    pub const PASSTHROUGH: u64 = 1 << 37;
    pub const HAS_RESEND: u64 = 1 << 39;
}

/// `fuse_open_out.open_flags`.
pub mod fopen {
    pub const DIRECT_IO: u32 = 1 << 0;
    pub const KEEP_CACHE: u32 = 1 << 1;
    pub const PASSTHROUGH: u32 = 1 << 7;
}

/// Notification codes (written with `unique = 0`, the code in `error`).
pub const NOTIFY_RESEND: i32 = 7;
/// The bit the kernel sets in the `unique` of a request it sends again.
pub const UNIQUE_RESEND: u64 = 1 << 63;

/// `ioctl`s on `/dev/fuse`: `_IOR(229, 0, u32)`, `_IOW(229, 1, fuse_backing_map)`,
/// `_IOW(229, 2, u32)`. The kernel takes a request as 32 bits; the C library's
/// `ioctl` as its own type (`libc::Ioctl`: glibc's unsigned long, musl's int),
/// which the callers cast to.
pub const DEV_IOC_CLONE: u32 = 0x8004_E500;
pub const DEV_IOC_BACKING_OPEN: u32 = 0x4010_E501;
pub const DEV_IOC_BACKING_CLOSE: u32 = 0x4004_E502;

/// Reads fixed-size fields off a request's argument bytes.
pub struct Args<'a> {
    buf: &'a [u8],
}

impl<'a> Args<'a> {
    pub fn new(buf: &'a [u8]) -> Args<'a> {
        Args { buf }
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        (self.buf.len() >= n).then(|| {
            let (a, b) = self.buf.split_at(n);
            self.buf = b;
            a
        })
    }
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_ne_bytes(self.take(4)?.try_into().ok()?))
    }
    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_ne_bytes(self.take(8)?.try_into().ok()?))
    }
    pub fn skip(&mut self, n: usize) -> Option<()> {
        self.take(n).map(drop)
    }
    /// A NUL-terminated name.
    pub fn name(&mut self) -> Option<&'a [u8]> {
        let end = self.buf.iter().position(|&b| b == 0)?;
        let name = &self.buf[..end];
        self.buf = &self.buf[end + 1..];
        Some(name)
    }
}

/// Appends fixed-size fields to a reply.
#[derive(Default)]
pub struct Out(pub Vec<u8>);

impl Out {
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    pub fn zeros(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
    /// Pads to a multiple of 8, as directory entries are.
    pub fn align8(&mut self) -> &mut Self {
        let pad = (8 - self.0.len() % 8) % 8;
        self.zeros(pad)
    }
}

/// What `stat` shows, in the kernel's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileAttr {
    pub ino: u64,
    pub size: u64,
    pub blocks: u64,
    /// Seconds and nanoseconds since the epoch, for atime, mtime and ctime alike.
    pub time: (u64, u32),
    /// `S_IFREG | 0444` and the like.
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub blksize: u32,
}

impl FileAttr {
    /// `struct fuse_attr`: 88 bytes.
    pub fn write(&self, o: &mut Out) {
        let (s, ns) = self.time;
        o.u64(self.ino).u64(self.size).u64(self.blocks);
        o.u64(s).u64(s).u64(s).u32(ns).u32(ns).u32(ns);
        o.u32(self.mode).u32(self.nlink).u32(self.uid).u32(self.gid);
        o.u32(0).u32(self.blksize).u32(0);
    }
}

/// `struct fuse_entry_out` (128 bytes): the inode, its generation, how long the
/// name and the attributes may be cached, and the attributes.
pub fn entry_out(o: &mut Out, attr: &FileAttr, ttl: std::time::Duration) {
    o.u64(attr.ino).u64(0);
    o.u64(ttl.as_secs()).u64(ttl.as_secs());
    o.u32(ttl.subsec_nanos()).u32(ttl.subsec_nanos());
    attr.write(o);
}

/// `d_type` of a directory entry, from a mode.
pub fn dirent_type(mode: u32) -> u32 {
    (mode & libc::S_IFMT) >> 12
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structures_have_the_kernels_sizes() {
        let attr = FileAttr {
            ino: 2,
            size: 3,
            blocks: 1,
            time: (4, 5),
            mode: libc::S_IFREG | 0o444,
            nlink: 1,
            uid: 0,
            gid: 0,
            blksize: 4096,
        };
        let mut o = Out::default();
        attr.write(&mut o);
        assert_eq!(o.0.len(), 88);
        let mut e = Out::default();
        entry_out(&mut e, &attr, std::time::Duration::from_millis(1500));
        assert_eq!(e.0.len(), 128);
        assert_eq!(dirent_type(attr.mode), libc::DT_REG as u32);
        let mut a = Args::new(b"name\0\x07\0\0\0");
        assert_eq!(a.name(), Some(&b"name"[..]));
        assert_eq!(a.u32(), Some(7));
        assert_eq!(a.u32(), None);
    }
}
