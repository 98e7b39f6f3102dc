//! A gRPC client's bytes over the CSI plugin's socket: anything, in reads of
//! any size, through the `:authority` rewriter (`shoal_csi::authority`) that
//! stands before the HTTP/2 server. Kept out of `lib.rs` so that only the fuzz
//! target and the CSI suite's corpus replay (`csi/tests/suite/fuzz_h2.rs`)
//! build it.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use shoal_csi::authority::AnyAuthority;
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// `data` handed out `step` bytes a read at most.
struct Pieces<'a> {
    data: &'a [u8],
    step: usize,
}

impl AsyncRead for Pieces<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = self.data.len().min(self.step).min(buf.remaining());
        buf.put_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Poll::Ready(Ok(()))
    }
}

/// The first byte sets the read size; the rest is the client's stream. Must
/// never panic; bytes that are not HTTP/2 with prior knowledge pass untouched,
/// and a stream that is keeps its preface first.
pub fn h2_authority(data: &[u8]) {
    let Some((&step, input)) = data.split_first() else {
        return;
    };
    let step = step as usize % 64 + 1;
    let mut out = Vec::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let r = rt.block_on(AnyAuthority::new(Pieces { data: input, step }).read_to_end(&mut out));
    let n = input.len().min(PREFACE.len());
    if input[..n] != PREFACE[..n] {
        assert_eq!(r.ok(), Some(input.len()), "not HTTP/2: passed through");
        assert_eq!(out, input);
    } else if r.is_ok() && input.len() >= PREFACE.len() {
        assert!(out.starts_with(PREFACE));
    }
}
