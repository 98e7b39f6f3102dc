//! A request as the kernel sends it: the header, then what the operation asks,
//! parsed into [`Op`]. Anything a read-only filesystem does not do parses to what
//! it answers (`EROFS` for writes, `ENOSYS` for the rest).

use super::abi::{self, op, Args};

#[derive(Clone, Copy, Debug)]
pub struct Header {
    pub len: u32,
    pub opcode: u32,
    /// Echoed in the reply (a resent request keeps its resend bit).
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

#[derive(Debug)]
pub enum Op<'a> {
    Init {
        major: u32,
        minor: u32,
        max_readahead: u32,
        flags: u64,
    },
    Lookup {
        name: &'a [u8],
    },
    Forget {
        nlookup: u64,
    },
    BatchForget {
        items: Vec<(u64, u64)>,
    },
    Getattr,
    Open {
        flags: i32,
    },
    Read {
        fh: u64,
        offset: u64,
        size: u32,
        /// The reader opened the file `O_DIRECT`: the page cache will not keep
        /// what this read returns (unknown counts as so).
        direct: bool,
    },
    Release {
        fh: u64,
    },
    Opendir,
    Readdir {
        fh: u64,
        offset: u64,
        size: u32,
        plus: bool,
    },
    Releasedir {
        fh: u64,
    },
    Statfs,
    Flush,
    Getxattr {
        size: u32,
    },
    Listxattr {
        size: u32,
    },
    Access {
        mask: u32,
    },
    Interrupt,
    Destroy,
    /// Would change the filesystem.
    Write,
    /// Not offered by this filesystem.
    Unsupported,
}

impl Op<'_> {
    /// Whether the kernel waits for an answer to it.
    pub fn wants_reply(&self) -> bool {
        !matches!(
            self,
            Op::Forget { .. } | Op::BatchForget { .. } | Op::Interrupt
        )
    }
}

/// Why a request could not be read.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

/// Parses one request read from the device.
pub fn parse(buf: &[u8]) -> Result<(Header, Op<'_>), Malformed> {
    let mut a = Args::new(buf);
    let short = Malformed("shorter than its header");
    let h = Header {
        len: a.u32().ok_or(Malformed("empty"))?,
        opcode: a.u32().ok_or(Malformed("no opcode"))?,
        unique: a.u64().ok_or(Malformed("no unique"))?,
        nodeid: a.u64().ok_or(Malformed("no node"))?,
        uid: a.u32().ok_or(Malformed("no uid"))?,
        gid: a.u32().ok_or(Malformed("no gid"))?,
        pid: a.u32().ok_or(Malformed("no pid"))?,
    };
    a.skip(4).ok_or(short)?;
    if h.len as usize != buf.len() {
        return Err(Malformed("length differs from what was read"));
    }
    let body = &buf[abi::IN_HEADER..];
    let mut a = Args::new(body);
    let truncated = Malformed("arguments cut short");
    let op = match h.opcode {
        op::INIT => {
            let major = a.u32().ok_or(truncated)?;
            let minor = a.u32().ok_or(Malformed("no minor"))?;
            let max_readahead = a.u32().ok_or(Malformed("no readahead"))?;
            let low = a.u32().ok_or(Malformed("no flags"))? as u64;
            // flags2 came with 7.36; older kernels send less.
            let high = a.u32().unwrap_or(0) as u64;
            Op::Init {
                major,
                minor,
                max_readahead,
                flags: low | high << 32,
            }
        }
        op::LOOKUP => Op::Lookup {
            name: a.name().ok_or(truncated)?,
        },
        op::FORGET => Op::Forget {
            nlookup: a.u64().ok_or(truncated)?,
        },
        op::BATCH_FORGET => {
            let count = a.u32().ok_or(truncated)?;
            a.skip(4).ok_or(Malformed("batch forget cut short"))?;
            let mut items = Vec::with_capacity(count.min(4096) as usize);
            for _ in 0..count {
                let ino = a.u64().ok_or(Malformed("forget entry cut short"))?;
                let n = a.u64().ok_or(Malformed("forget entry cut short"))?;
                items.push((ino, n));
            }
            Op::BatchForget { items }
        }
        op::GETATTR => Op::Getattr,
        op::OPEN => Op::Open {
            flags: a.u32().ok_or(truncated)? as i32,
        },
        op::OPENDIR => Op::Opendir,
        op::READ | op::READDIR | op::READDIRPLUS => {
            let fh = a.u64().ok_or(truncated)?;
            let offset = a.u64().ok_or(Malformed("read cut short"))?;
            let size = a.u32().ok_or(Malformed("read cut short"))?;
            match h.opcode {
                op::READ => {
                    // read_flags and lock_owner, then the file's open flags.
                    let flags = a.u32().and_then(|_| a.u64()).and_then(|_| a.u32());
                    Op::Read {
                        fh,
                        offset,
                        size,
                        direct: flags.is_none_or(|f| f & libc::O_DIRECT as u32 != 0),
                    }
                }
                o => Op::Readdir {
                    fh,
                    offset,
                    size,
                    plus: o == op::READDIRPLUS,
                },
            }
        }
        op::RELEASE => Op::Release {
            fh: a.u64().ok_or(truncated)?,
        },
        op::RELEASEDIR => Op::Releasedir {
            fh: a.u64().ok_or(truncated)?,
        },
        op::STATFS => Op::Statfs,
        op::FLUSH => Op::Flush,
        op::GETXATTR => Op::Getxattr {
            size: a.u32().ok_or(truncated)?,
        },
        op::LISTXATTR => Op::Listxattr {
            size: a.u32().ok_or(truncated)?,
        },
        op::ACCESS => Op::Access {
            mask: a.u32().ok_or(truncated)?,
        },
        op::INTERRUPT => Op::Interrupt,
        op::DESTROY => Op::Destroy,
        o if op::WRITES.contains(&o) => Op::Write,
        _ => Op::Unsupported,
    };
    Ok((h, op))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(opcode: u32, unique: u64, body: &[u8]) -> Vec<u8> {
        let mut o = abi::Out::default();
        o.u32((abi::IN_HEADER + body.len()) as u32)
            .u32(opcode)
            .u64(unique)
            .u64(1)
            .u32(1000)
            .u32(1000)
            .u32(42)
            .u32(0)
            .bytes(body);
        o.0
    }

    #[test]
    fn requests_parse_and_bad_ones_are_refused() {
        let r = request(op::LOOKUP, 8, b"file.txt\0");
        let (h, o) = parse(&r).unwrap();
        assert_eq!((h.unique, h.nodeid, h.pid), (8, 1, 42));
        assert!(matches!(o, Op::Lookup { name } if name == b"file.txt"));

        let mut body = abi::Out::default();
        body.u64(7)
            .u64(4096)
            .u32(131072)
            .u32(0)
            .u64(0)
            .u32(libc::O_RDONLY as u32)
            .u32(0);
        let r = request(op::READ, 10 | abi::UNIQUE_RESEND, &body.0);
        let (h, o) = parse(&r).unwrap();
        assert_eq!(h.unique & abi::UNIQUE_RESEND, abi::UNIQUE_RESEND);
        assert!(matches!(
            o,
            Op::Read {
                fh: 7,
                offset: 4096,
                size: 131072,
                direct: false
            }
        ));
        // An O_DIRECT reader, and a request too old to say.
        let mut body = abi::Out::default();
        body.u64(7).u64(0).u32(4096).u32(0).u64(0);
        body.u32(libc::O_DIRECT as u32).u32(0);
        let r = request(op::READ, 12, &body.0);
        assert!(matches!(
            parse(&r).unwrap().1,
            Op::Read { direct: true, .. }
        ));
        let mut body = abi::Out::default();
        body.u64(7).u64(0).u32(4096);
        let r = request(op::READ, 14, &body.0);
        assert!(matches!(
            parse(&r).unwrap().1,
            Op::Read { direct: true, .. }
        ));

        let mut body = abi::Out::default();
        body.u32(2).u32(0).u64(5).u64(1).u64(6).u64(2);
        let r = request(op::BATCH_FORGET, 0, &body.0);
        let (_, o) = parse(&r).unwrap();
        assert!(matches!(o, Op::BatchForget { ref items } if items == &[(5, 1), (6, 2)]));
        assert!(!o.wants_reply());

        assert!(matches!(
            parse(&request(16, 2, &[0; 40])).unwrap().1,
            Op::Write
        ));
        assert!(matches!(
            parse(&request(999, 2, &[])).unwrap().1,
            Op::Unsupported
        ));
        assert!(parse(&request(op::LOOKUP, 3, b"no-nul")).is_err());
        assert!(parse(&request(op::READ, 3, &[0; 8])).is_err());
        let mut lying = request(op::STATFS, 4, &[]);
        lying[0] = 200;
        assert!(parse(&lying).is_err());
        assert!(parse(&[1, 2, 3]).is_err());
    }
}
