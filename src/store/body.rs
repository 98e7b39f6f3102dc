//! [`Body`]: a GET's body read into a buffer the caller owns, as a socket is read.
//!
//! Blocks are written once, into the buffer their readers get slices of
//! ([`crate::blocks::growing`]). A body that arrives as chunks (a test double, a
//! TLS or proxied connection) is copied into that buffer as it comes; one read
//! straight off a plain-HTTP connection ([`super::s3`]'s socket transport) lands
//! there without a copy in between.

use bytes::Bytes;
use futures_util::StreamExt;

use super::pipe::Pipe;
use super::s3::SocketBody;
use super::{ByteStream, GetResponse, ObjectMeta, StoreError};

/// A GET's answer, its body still to be read.
pub struct BodyResponse {
    pub meta: ObjectMeta,
    /// The span of the object the body holds (`start..end`).
    pub start: u64,
    pub end: u64,
    pub body: Body,
}

/// How a splice into a pipe ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spliced {
    /// All the bytes asked for are in the pipe.
    Whole,
    /// Fewer: the rest must be read.
    Stopped,
}

/// A body, read by [`Body::read`] into the caller's buffer.
pub enum Body {
    /// Chunks as a stream yields them, each copied out.
    Chunks { stream: ByteStream, pending: Bytes },
    /// Straight from the connection.
    Socket(SocketBody),
}

impl From<GetResponse> for BodyResponse {
    fn from(r: GetResponse) -> Self {
        BodyResponse {
            meta: r.meta,
            start: r.start,
            end: r.end,
            body: Body::chunks(r.body),
        }
    }
}

impl Body {
    pub fn chunks(stream: ByteStream) -> Body {
        Body::Chunks {
            stream,
            pending: Bytes::new(),
        }
    }

    /// Reads the next bytes into `dst`; how many (0: the body has ended, or `dst`
    /// is empty). A body that breaks off is an error, whatever came before it.
    pub async fn read(&mut self, dst: &mut [u8]) -> Result<usize, StoreError> {
        if dst.is_empty() {
            return Ok(0);
        }
        match self {
            Body::Socket(s) => s.read(dst).await,
            Body::Chunks { stream, pending } => {
                while pending.is_empty() {
                    match stream.next().await {
                        Some(c) => *pending = c?,
                        None => return Ok(0),
                    }
                }
                let n = pending.len().min(dst.len());
                dst[..n].copy_from_slice(&pending.split_to(n));
                Ok(n)
            }
        }
    }

    /// Moves the next `want` bytes into `pipe`, for a body read off a socket;
    /// any other (and one the pipe has no room for) stops where it is, to be
    /// read with [`Self::read`].
    pub async fn splice_into(&mut self, pipe: &mut Pipe, want: u64) -> Result<Spliced, StoreError> {
        match self {
            Body::Socket(s) => s.splice_into(pipe, want).await,
            Body::Chunks { .. } => Ok(Spliced::Stopped),
        }
    }

    /// Wraps a chunked body's stream (a socket body keeps the deadlines of the
    /// client that opened it).
    pub fn map_stream(self, f: impl FnOnce(ByteStream) -> ByteStream) -> Body {
        match self {
            Body::Chunks { stream, pending } => Body::Chunks {
                stream: f(stream),
                pending,
            },
            s => s,
        }
    }
}
