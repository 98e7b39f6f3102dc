//! A body spliced from its connection into a pipe: its bytes never enter this
//! process ([`crate::store::pipe`]).

use std::os::fd::AsRawFd;

use super::{when_readable, SocketBody};
use crate::store::pipe::{Pipe, PIPE_BYTES};
use crate::store::{Spliced, StoreError};

impl SocketBody {
    /// Moves the next `want` bytes of the body into `pipe` (spliced from the
    /// socket, never read into this process). Stops early, with the body left
    /// where it stopped, when the pipe has no room for more: the rest is read
    /// with [`Self::read`].
    pub async fn splice_into(&mut self, pipe: &mut Pipe, want: u64) -> Result<Spliced, StoreError> {
        let mut left = want.min(self.remaining());
        if !self.early.is_empty() {
            let n = (self.early.len() as u64).min(left) as usize;
            let from = self.early.start;
            pipe.put(&self.buf[from..from + n])
                .map_err(|e| self.sockets.transport(format!("cannot fill a pipe: {e}")))?;
            self.early.start += n;
            left -= n as u64;
        }
        while left > 0 {
            let Some(conn) = self.conn.as_ref() else {
                return Err(self
                    .sockets
                    .transport("the body was already abandoned".into()));
            };
            let fd = conn.as_raw_fd();
            let n = left.min(PIPE_BYTES as u64) as usize;
            // A pipe with no room is not a socket with no bytes: told apart
            // here, so the socket's readiness is cleared only for the latter.
            // Bytes may arrive between a refused splice and the count of what
            // is waiting, so a pipe is full only when a second splice is refused
            // with bytes known to be there (no one else takes them).
            let splice = || match pipe.splice_from(fd, n) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && pending(fd) > 0 => {
                    match pipe.splice_from(fd, n) {
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            Err(std::io::Error::other(PipeFull))
                        }
                        r => r,
                    }
                }
                r => r,
            };
            let spliced = match when_readable(conn, &self.sockets, self.remaining, splice).await {
                Ok(r) => r,
                Err(e) => {
                    // The connection is in an unknown place of an answer.
                    self.conn = None;
                    return Err(e);
                }
            };
            match spliced {
                Ok(got) => {
                    self.remaining -= got as u64;
                    left -= got as u64;
                }
                Err(e) if e.get_ref().is_some_and(|e| e.is::<PipeFull>()) => {
                    return Ok(Spliced::Stopped);
                }
                Err(e) => {
                    self.conn = None;
                    return Err(self.sockets.transport(format!("body cut off: {e}")));
                }
            }
        }
        if self.remaining == 0 && self.early.is_empty() {
            self.release();
        }
        Ok(Spliced::Whole)
    }
}

/// A splice stopped by a full pipe, not an empty socket.
#[derive(Debug)]
struct PipeFull;

impl std::fmt::Display for PipeFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the pipe is full")
    }
}

impl std::error::Error for PipeFull {}

/// Bytes that socket `fd` has received and not yet given out.
fn pending(fd: std::os::fd::RawFd) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes an int.
    if unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) } < 0 {
        return 0;
    }
    n.max(0) as usize
}
