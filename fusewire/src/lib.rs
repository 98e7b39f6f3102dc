//! The kernel side of a FUSE mount, spoken directly over `/dev/fuse`, for a
//! read-only filesystem whose connection outlives the process serving it. A
//! successor takes over a live connection without a second INIT (it speaks what
//! the first server agreed, [`Negotiated`]), readers stop without losing a
//! request they have taken, requests a dead server took are asked for again
//! (`FUSE_NOTIFY_RESEND`), files can be passed through to a backing file, and a
//! read's answer goes out from the buffers its bytes arrived in (one `writev`) or
//! from a pipe (one `splice`).
//!
//! [`abi`] is the wire format; [`request`] parses what the kernel sends (pure:
//! bytes in, a request or why not out); [`reply`] has one answer type per kind of
//! operation; [`channel`] is the device; [`session`] runs the handshake and the
//! reader threads, handing each request to a [`Filesystem`]; [`mount`] makes and
//! ends the mount. Everything that would write is answered `EROFS` here.

pub mod abi;
pub mod channel;
pub mod mount;
pub mod reply;
pub mod request;
pub mod session;

pub use abi::FileAttr;
pub use channel::{Channel, Stop};
pub use reply::{
    DirBuf, ReplyAttr, ReplyData, ReplyDir, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyXattr, Spliced,
};
pub use request::{Header, Op};
pub use session::{handshake, Ended, Filesystem, Negotiated, Running, Wants};
