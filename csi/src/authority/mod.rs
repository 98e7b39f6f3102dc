//! Any `:authority` over the plugin's Unix socket. A gRPC client there has no
//! host to name, and they differ in what they send: grpc-go (kubelet)
//! `localhost`, grpc-python and grpc-java the socket's path, percent-encoded or
//! not. The HTTP/2 server under tonic (`h2`) resets every stream whose
//! `:authority` is not a URI authority (PROTOCOL_ERROR), and has no setting to
//! be looser. So the bytes a client sends pass through [`AnyAuthority`] on
//! their way to it, which puts `localhost` in place of an authority that is
//! not one. Nothing in the plugin reads the authority: over a socket it names
//! nothing.
//!
//! Header blocks are compressed (HPACK) with a table both ends keep: a block
//! is decoded with the client's table and encoded again, with a table of size
//! 0 (every field literal or in the static table), which any server's table
//! size allows. Every other frame passes as it came.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

mod rewriter;

use rewriter::Rewriter;

/// A connection whose client's header blocks are made acceptable to `h2`
/// (see the module's comment); writes pass through.
pub struct AnyAuthority<S> {
    inner: S,
    rewriter: Rewriter,
    eof: bool,
}

impl<S> AnyAuthority<S> {
    pub fn new(inner: S) -> Self {
        AnyAuthority {
            inner,
            rewriter: Rewriter::new(),
            eof: false,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AnyAuthority<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        loop {
            if let Some(bytes) = me.rewriter.take(buf.remaining()) {
                buf.put_slice(&bytes);
                return Poll::Ready(Ok(()));
            }
            if me.eof {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 16_384];
            let mut rb = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut me.inner).poll_read(cx, &mut rb))?;
            if rb.filled().is_empty() {
                me.eof = true;
                me.rewriter.end();
                continue;
            }
            me.rewriter.push(rb.filled())?;
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AnyAuthority<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected
    for AnyAuthority<S>
{
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::rewriter::{
        CONTINUATION, END_HEADERS, END_STREAM, HEADERS, MAX_FRAME, PADDED, PREFACE, PRIORITY,
    };
    use super::*;
    use tokio::io::AsyncReadExt;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend_from_slice(&[kind, flags]);
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// The frames a server reads after `input`, split in reads of `step` bytes.
    async fn through(input: &[u8], step: usize) -> Vec<u8> {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let chunks: Vec<Vec<u8>> = input.chunks(step).map(|c| c.to_vec()).collect();
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for c in chunks {
                client.write_all(&c).await.unwrap();
                client.flush().await.unwrap();
                tokio::task::yield_now().await;
            }
        });
        let mut out = Vec::new();
        AnyAuthority::new(server)
            .read_to_end(&mut out)
            .await
            .unwrap();
        writer.await.unwrap();
        out
    }

    type Fields = Vec<(Vec<u8>, Vec<u8>)>;

    /// The header blocks in `bytes` (after the preface), decoded; other frames
    /// as (type, payload).
    fn read_frames(mut bytes: &[u8]) -> (Vec<Fields>, Vec<(u8, Vec<u8>)>) {
        assert_eq!(&bytes[..PREFACE.len()], PREFACE);
        bytes = &bytes[PREFACE.len()..];
        let mut d = loona_hpack::Decoder::new();
        let (mut blocks, mut others, mut pending) = (Vec::new(), Vec::new(), Vec::new());
        while !bytes.is_empty() {
            let len = u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]) as usize;
            let (kind, flags) = (bytes[3], bytes[4]);
            let payload = &bytes[9..9 + len];
            assert!(len <= MAX_FRAME);
            match kind {
                HEADERS | CONTINUATION => {
                    let p = if kind == HEADERS && flags & PRIORITY != 0 {
                        &payload[5..]
                    } else {
                        payload
                    };
                    pending.extend_from_slice(p);
                    if flags & END_HEADERS != 0 {
                        blocks.push(d.decode(&pending).unwrap());
                        pending.clear();
                    }
                }
                _ => others.push((kind, payload.to_vec())),
            }
            bytes = &bytes[9 + len..];
        }
        (blocks, others)
    }

    fn request(authority: &[u8]) -> Vec<(&[u8], &[u8])> {
        vec![
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", b"/csi.v1.Identity/GetPluginInfo"),
            (b":authority", authority),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        ]
    }

    /// An HPACK string literal, not Huffman-coded (shorter than 127 bytes).
    fn lit(s: &[u8]) -> Vec<u8> {
        let mut v = vec![s.len() as u8];
        v.extend_from_slice(s);
        v
    }

    #[tokio::test]
    async fn a_path_for_an_authority_becomes_localhost_and_the_rest_passes() {
        let path = b"%2Frun%2Fcsi%2Fcsi.sock".as_slice();
        // As grpc's encoder writes them: the path and authority put in the
        // table (literal with incremental indexing, names from the static
        // table), then referred to by index in the next request.
        let mut first = vec![0x83, 0x86, 0x44];
        first.extend(lit(b"/csi.v1.Identity/GetPluginInfo"));
        first.push(0x41);
        first.extend(lit(path));
        first.push(0x40);
        first.extend(lit(b"te"));
        first.extend(lit(b"trailers"));
        // Table now: te (62), :authority (63), :path (64).
        let second = vec![0x83, 0x86, 0x80 | 64, 0x80 | 63, 0x80 | 62];
        let mut good = vec![0x83, 0x86, 0x80 | 64, 0x01];
        good.extend(lit(b"localhost:50051"));

        let mut input = PREFACE.to_vec();
        input.extend(frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100]));
        // The first block split over HEADERS (padded, with a priority) and a
        // CONTINUATION.
        let mut h = vec![4u8];
        h.extend_from_slice(&[0, 0, 0, 0, 16]);
        h.extend_from_slice(&first[..10]);
        h.extend_from_slice(&[0; 4]);
        input.extend(frame(HEADERS, PADDED | PRIORITY, 1, &h));
        input.extend(frame(CONTINUATION, END_HEADERS, 1, &first[10..]));
        input.extend(frame(0x0, END_STREAM, 1, b"\0\0\0\0\0"));
        input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 3, &second));
        input.extend(frame(HEADERS, END_HEADERS, 5, &good));
        for step in [1, 7, 4096] {
            let out = through(&input, step).await;
            let (blocks, others) = read_frames(&out);
            assert_eq!(blocks.len(), 3, "step {step}");
            let field = |b: &Fields, name: &[u8]| {
                b.iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
                    .unwrap()
            };
            assert_eq!(field(&blocks[0], b":authority"), b"localhost");
            assert_eq!(field(&blocks[1], b":authority"), b"localhost");
            assert_eq!(
                field(&blocks[2], b":authority"),
                b"localhost:50051",
                "an authority stays"
            );
            for b in &blocks {
                assert_eq!(field(b, b":path"), b"/csi.v1.Identity/GetPluginInfo");
                assert_eq!(field(b, b":method"), b"POST");
            }
            assert_eq!(field(&blocks[1], b"te"), b"trailers");
            assert_eq!(
                others,
                vec![
                    (0x4, vec![0, 3, 0, 0, 0, 100]),
                    (0x0, b"\0\0\0\0\0".to_vec())
                ],
                "other frames pass as they came"
            );
        }
    }

    #[tokio::test]
    async fn a_block_larger_than_a_frame_goes_in_continuations() {
        let mut enc = loona_hpack::Encoder::new();
        let big = vec![b'x'; 40_000];
        let mut fields = request(b"/a/path");
        fields.push((b"x-big", &big));
        let block = enc.encode(fields);
        let mut input = PREFACE.to_vec();
        let mut chunks = block.chunks(MAX_FRAME).peekable();
        let mut kind = HEADERS;
        while let Some(c) = chunks.next() {
            let flags = if chunks.peek().is_none() {
                END_HEADERS
            } else {
                0
            };
            input.extend(frame(kind, flags, 1, c));
            kind = CONTINUATION;
        }
        let (blocks, _) = read_frames(&through(&input, 5000).await);
        assert_eq!(blocks.len(), 1);
        assert_eq!(blocks[0].last().unwrap().1.len(), 40_000);
    }

    #[tokio::test]
    async fn what_is_not_http2_passes_untouched() {
        let input = b"GET / HTTP/1.1\r\nHost: /a/path\r\n\r\n".to_vec();
        assert_eq!(through(&input, 3).await, input);
    }

    #[tokio::test]
    async fn a_header_block_that_does_not_decode_ends_the_connection() {
        let mut input = PREFACE.to_vec();
        input.extend(frame(
            HEADERS,
            END_HEADERS,
            1,
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        ));
        let (mut client, server) = tokio::io::duplex(1 << 16);
        tokio::io::AsyncWriteExt::write_all(&mut client, &input)
            .await
            .unwrap();
        drop(client);
        let mut out = Vec::new();
        let r = AnyAuthority::new(server).read_to_end(&mut out).await;
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
