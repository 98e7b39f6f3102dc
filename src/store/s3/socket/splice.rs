//! A body spliced from its connection into a pipe: its bytes never enter this
//! process ([`crate::store::pipe`]).

use std::os::fd::AsRawFd;

use super::body::SocketBody;
use super::wait::{pending, when_readable};
use crate::store::pipe::{Pipe, PIPE_BYTES};
use crate::store::{Spliced, StoreError};

impl SocketBody {
    /// Moves the next `want` bytes of the body into `pipe` (spliced from the
    /// socket, never read into this process). Stops early, with the body left
    /// where it stopped, when the pipe has no room for more: the rest is read
    /// with [`Self::read`].
    pub async fn splice_into(&mut self, pipe: &mut Pipe, want: u64) -> Result<Spliced, StoreError> {
        let mut left = want.min(self.remaining());
        // Whether this call raised the socket's low-water mark: put back to
        // one byte before anything else reads the connection.
        let mut raised = false;
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
            // with bytes known to be there (no one else takes them). An empty
            // socket wakes this task only once [`mark`] bytes are there (or the
            // connection ends), not for every segment that lands.
            let splice = || match pipe.splice_from(fd, n) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if pending(fd) == 0 {
                        raised |= set_lowat(fd, mark(left));
                        return Err(e);
                    }
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
                    if raised {
                        set_lowat(fd, 1);
                    }
                    return Ok(Spliced::Stopped);
                }
                Err(e) => {
                    self.conn = None;
                    return Err(self.sockets.transport(format!("body cut off: {e}")));
                }
            }
        }
        if let (true, Some(conn)) = (raised, self.conn.as_ref()) {
            set_lowat(conn.as_raw_fd(), 1);
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

/// How many of the `left` bytes still to come a waiting splice waits for: half
/// (the first half goes into the pipe while the second arrives), and at least
/// 64 KiB. Each wake is a context switch: a warm 1 MiB block from a node woke
/// the mount three and a half times when woken for every segment, one and a
/// half with this mark; waking once, for all of it, cost a sixth of the MB/s
/// (A/B on loopback, pinned).
fn mark(left: u64) -> u64 {
    (left / 2).max(left.min(64 << 10))
}

/// Has socket `fd` report itself readable only once `bytes` have arrived (the
/// kernel caps this at half its largest receive buffer, growing the buffer to
/// hold them; an ended connection is readable whatever is there). Whether it
/// took.
fn set_lowat(fd: std::os::fd::RawFd, bytes: u64) -> bool {
    let v = bytes.clamp(1, i32::MAX as u64) as libc::c_int;
    // SAFETY: SO_RCVLOWAT reads an int of the given size.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::super::pool::Sockets;
    use super::*;

    /// Serves every request on a connection with `body`, in `pieces` parts
    /// `gap` apart.
    async fn trickling(body: Vec<u8>, pieces: usize, gap: Duration) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let body = body.clone();
                tokio::spawn(async move {
                    let mut req = Vec::new();
                    let mut buf = [0u8; 4096];
                    loop {
                        while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                            match conn.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => req.extend_from_slice(&buf[..n]),
                            }
                        }
                        req.clear();
                        let head =
                            format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
                        conn.write_all(head.as_bytes()).await.unwrap();
                        for part in body.chunks(body.len().div_ceil(pieces)) {
                            tokio::time::sleep(gap).await;
                            conn.write_all(part).await.unwrap();
                        }
                    }
                });
            }
        });
        addr
    }

    fn lowat(conn: &tokio::net::TcpStream) -> libc::c_int {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: SO_RCVLOWAT writes an int of the given size.
        let r = unsafe {
            libc::getsockopt(
                conn.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(r, 0);
        v
    }

    #[test]
    fn a_splice_waits_for_half_of_what_is_left_and_at_least_64_kib() {
        let marks: Vec<u64> = [1 << 20, 200 << 10, 100 << 10, 64 << 10, 1000, 1]
            .into_iter()
            .map(mark)
            .collect();
        assert_eq!(marks, [512 << 10, 100 << 10, 64 << 10, 64 << 10, 1000, 1]);
    }

    #[tokio::test]
    async fn a_body_arriving_slower_than_the_stall_deadline_but_without_pause_is_spliced_whole() {
        // 8 parts 100 ms apart: 800 ms in all against a 300 ms stall deadline,
        // and 400 ms to the first low-water mark.
        let body: Vec<u8> = (0..256 << 10).map(|i: u32| (i % 251) as u8).collect();
        let addr = trickling(body.clone(), 8, Duration::from_millis(100)).await;
        let sockets = Arc::new(Sockets::new(
            4,
            Duration::from_secs(1),
            Duration::from_millis(300),
            "test".into(),
        ));
        let mut pipe = Pipe::new().unwrap();
        for _ in 0..2 {
            let mut a = sockets
                .get(&addr, "h", "/k", &Default::default())
                .await
                .unwrap();
            assert_eq!(a.status, 200);
            let r = a.body.splice_into(&mut pipe, body.len() as u64).await;
            assert_eq!(r.unwrap(), Spliced::Whole);
            let mut out = vec![0u8; body.len()];
            assert_eq!(pipe.drain(&mut out).unwrap(), body.len());
            assert!(out == body);
            // The connection is kept, and wakes its next reader for one byte.
            let (conn, buf) = sockets.kept(&addr).expect("the connection was kept");
            assert_eq!(lowat(&conn), 1);
            sockets.keep(addr.clone(), conn, buf);
        }
    }
}
