//! An answer's body as its connection gives it: the bytes that came with the head
//! first, then reads off the socket up to the length the head framed, and the
//! connection handed back to the pool once the body has ended exactly there.

use std::sync::Arc;

use tokio::net::TcpStream;

use super::pool::Sockets;
use super::wait::read_some;
use crate::store::s3::chunked::{dechunk, Chunks};
use crate::store::StoreError;

/// The most of an error answer's body that is read (S3's error XML is small).
const MAX_ERROR_BODY: u64 = 64 << 10;

/// The body of an answer, read from its connection; the connection is kept for
/// the next request once the body has been read to its end.
pub struct SocketBody {
    pub(super) conn: Option<TcpStream>,
    pub(super) authority: String,
    /// The connection's buffer; `early` of it are body bytes that came with the
    /// head, handed out first.
    pub(super) buf: Vec<u8>,
    pub(super) early: std::ops::Range<usize>,
    pub(super) remaining: u64,
    /// An error answer's chunked body: its length is not known, and only
    /// [`SocketBody::small`] reads it.
    pub(super) chunked: bool,
    /// Whether the connection may carry another request after this one.
    pub(super) reusable: bool,
    pub(super) sockets: Arc<Sockets>,
    /// The request's place in the origin's budget, given back with the body.
    pub(super) permit: Option<crate::store::budget::Permit>,
}

impl SocketBody {
    /// Holds `permit` until the body is dropped.
    pub(in crate::store::s3) fn hold(&mut self, permit: crate::store::budget::Permit) {
        self.permit = Some(permit);
    }

    /// Bytes of the body still to come (of a body framed by its length).
    pub fn remaining(&self) -> u64 {
        self.remaining + self.early.len() as u64
    }

    /// Reads the next bytes of the body into `dst` (0: it has ended). Waits at
    /// most the stall deadline for each.
    pub async fn read(&mut self, dst: &mut [u8]) -> Result<usize, StoreError> {
        if !self.early.is_empty() {
            let n = self.early.len().min(dst.len());
            let from = self.early.start;
            dst[..n].copy_from_slice(&self.buf[from..from + n]);
            self.early.start += n;
            if self.remaining == 0 && self.early.is_empty() {
                self.release();
            }
            return Ok(n);
        }
        if dst.is_empty() {
            return Ok(0);
        }
        if self.remaining == 0 {
            self.release();
            return Ok(0);
        }
        let want = (dst.len() as u64).min(self.remaining) as usize;
        let Some(conn) = self.conn.as_ref() else {
            return Err(self
                .sockets
                .transport("the body was already abandoned".into()));
        };
        let got = read_some(conn, &mut dst[..want], &self.sockets, self.remaining).await;
        match got {
            Ok(n) => {
                self.remaining -= n as u64;
                if self.remaining == 0 {
                    self.release();
                }
                Ok(n)
            }
            Err(e) => {
                // The connection is in an unknown place of an answer: never used again.
                self.conn = None;
                Err(e)
            }
        }
    }

    /// The whole (small) body, for an error answer: at most 64 KiB is read, and
    /// nothing of a longer one.
    pub(in crate::store::s3) async fn small(mut self) -> Vec<u8> {
        if self.chunked {
            return self.small_chunked().await;
        }
        if self.remaining() > MAX_ERROR_BODY {
            return Vec::new();
        }
        let mut out = vec![0u8; self.remaining() as usize];
        let mut at = 0;
        while at < out.len() {
            match self.read(&mut out[at..]).await {
                Ok(0) | Err(_) => break,
                Ok(n) => at += n,
            }
        }
        out.truncate(at);
        out
    }

    /// [`Self::small`] of a chunked body: raw bytes until the chunks are
    /// complete, then decoded (nothing if they run past the bound or break off).
    async fn small_chunked(mut self) -> Vec<u8> {
        let mut raw = self.buf[self.early.clone()].to_vec();
        let Some(conn) = self.conn.take() else {
            return Vec::new();
        };
        loop {
            match dechunk(&raw, MAX_ERROR_BODY as usize) {
                Chunks::Whole(body) => return body,
                Chunks::Bad => return Vec::new(),
                Chunks::Partial if raw.len() as u64 > MAX_ERROR_BODY => return Vec::new(),
                Chunks::Partial => {}
            }
            let mut buf = [0u8; 4096];
            match read_some(&conn, &mut buf, &self.sockets, 0).await {
                Ok(n) => raw.extend_from_slice(&buf[..n]),
                Err(_) => return Vec::new(),
            }
        }
    }

    /// Gives the connection back for the next request once the body is read.
    pub(super) fn release(&mut self) {
        if let Some(conn) = self.conn.take() {
            if self.reusable && self.remaining == 0 && self.early.is_empty() {
                self.sockets.keep(
                    std::mem::take(&mut self.authority),
                    conn,
                    std::mem::take(&mut self.buf),
                );
            }
        }
    }
}
