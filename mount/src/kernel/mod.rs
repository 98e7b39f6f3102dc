//! The kernel side of a mount, spoken directly: the FUSE protocol over
//! `/dev/fuse`, owned here rather than by a FUSE crate because a shoal mount
//! outlives the process serving it. A successor takes over a live connection
//! without a second INIT (it speaks what the first daemon agreed), readers stop
//! without losing a request they have taken, requests a dead daemon took are
//! asked for again (`FUSE_NOTIFY_RESEND`), and a read's answer goes out from the
//! buffers its bytes arrived in, in one `writev`.
//!
//! [`abi`] is the wire format; [`request`] parses what the kernel sends;
//! [`reply`] answers it; [`channel`] is the device; [`session`] runs the
//! handshake and the reader threads; [`mount`] makes and ends the mount.

pub mod abi;
pub mod channel;
pub mod mount;
pub mod reply;
pub mod request;
pub mod session;

pub use abi::FileAttr;
pub use channel::{Channel, Stop};
pub use reply::{DirBuf, Reply};
pub use request::{Header, Op};
pub use session::{handshake, Ended, Handler, Negotiated, Running, Wants};
