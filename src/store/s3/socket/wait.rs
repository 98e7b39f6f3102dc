//! Waiting on a connection for a body's next bytes: each wait is bounded by the
//! stall deadline, and a body still arriving (if slower than the socket's
//! low-water mark asks for) is not stalled.

use std::os::fd::AsRawFd;

use tokio::io::Interest;
use tokio::net::TcpStream;

use super::pool::Sockets;
use crate::store::{Deadline, StoreError};

/// Some bytes (at least one) of a body off `conn` into `dst`, within the stall
/// deadline for each wait; `left` of it are still to come.
pub(super) async fn read_some(
    conn: &TcpStream,
    dst: &mut [u8],
    sockets: &Sockets,
    left: u64,
) -> Result<usize, StoreError> {
    let fd = conn.as_raw_fd();
    // SAFETY: receiving into a buffer we borrow.
    let recv = || match unsafe { libc::recv(fd, dst.as_mut_ptr().cast(), dst.len(), 0) } {
        n if n < 0 => Err(std::io::Error::last_os_error()),
        n => Ok(n as usize),
    };
    when_readable(conn, sockets, left, recv)
        .await?
        .map_err(|e| sockets.transport(format!("body cut off: {e}")))
}

/// What `op` moved off `conn` (how many bytes; none means the body ended
/// early, an error), run as soon as `conn` has bytes, within the stall
/// deadline for each wait; `left` bytes of the body are still to come. Errors
/// of `op` other than "would block" are the caller's to judge.
pub(super) async fn when_readable(
    conn: &TcpStream,
    sockets: &Sockets,
    left: u64,
    mut op: impl FnMut() -> std::io::Result<usize>,
) -> Result<std::io::Result<usize>, StoreError> {
    loop {
        match conn.try_io(Interest::READABLE, &mut op) {
            Ok(0) => {
                return Err(sockets.transport(format!(
                    "body cut off: the connection closed {left} bytes short"
                )))
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                match tokio::time::timeout(sockets.stall, conn.readable()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return Err(sockets.transport(format!("body cut off: {e}"))),
                    // Bytes came, fewer than the socket's low-water mark
                    // ([`super::splice`]): a body still arriving is not stalled.
                    Err(_) if pending(conn.as_raw_fd()) > 0 => {}
                    Err(_) => {
                        return Err(StoreError::Timeout {
                            endpoint: sockets.label.clone(),
                            deadline: Deadline::Stall,
                            after: sockets.stall,
                        })
                    }
                }
            }
            r => return Ok(r),
        }
    }
}

/// Bytes that socket `fd` has received and not yet given out.
pub(super) fn pending(fd: std::os::fd::RawFd) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes an int.
    if unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) } < 0 {
        return 0;
    }
    n.max(0) as usize
}
