//! The client's bytes as `h2` is to read them: the preface, then frame by frame,
//! every header block (HEADERS and its CONTINUATIONs) decoded with the client's
//! HPACK table, its `:authority` put right, and encoded again with a table of
//! size 0; every other frame, and anything that is not HTTP/2 with prior
//! knowledge, as it came.

use std::io;

use bytes::{Buf, BytesMut};

/// What an HTTP/2 client sends first (RFC 9113, 3.4).
pub(super) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEAD: usize = 9;
pub(super) const HEADERS: u8 = 0x1;
pub(super) const CONTINUATION: u8 = 0x9;
pub(super) const END_STREAM: u8 = 0x1;
pub(super) const END_HEADERS: u8 = 0x4;
pub(super) const PADDED: u8 = 0x8;
pub(super) const PRIORITY: u8 = 0x20;
/// The largest frame every HTTP/2 peer takes (its SETTINGS_MAX_FRAME_SIZE at
/// least this).
pub(super) const MAX_FRAME: usize = 16_384;
/// The largest header block gathered from HEADERS and CONTINUATION frames.
const MAX_BLOCK: usize = 1 << 20;
/// What stands for an authority that is not one.
const LOCALHOST: &[u8] = b"localhost";

/// The client's bytes, those looked at ready for the server.
pub(super) struct Rewriter {
    /// Bytes from the client not looked at yet.
    raw: BytesMut,
    /// Bytes looked at, for the server to read.
    ready: BytesMut,
    state: State,
    /// A header block waiting for its CONTINUATION frames.
    block: Option<Block>,
    decoder: loona_hpack::Decoder<'static>,
    encoder: loona_hpack::Encoder<'static>,
}

#[derive(PartialEq)]
enum State {
    Preface,
    Frames,
    /// Not HTTP/2 with prior knowledge: none of ours to look at.
    Through,
}

struct Block {
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
}

impl Rewriter {
    pub(super) fn new() -> Self {
        let mut encoder = loona_hpack::Encoder::new();
        encoder.set_max_table_size(0);
        Rewriter {
            raw: BytesMut::new(),
            ready: BytesMut::new(),
            state: State::Preface,
            block: None,
            decoder: loona_hpack::Decoder::new(),
            encoder,
        }
    }

    /// Takes `bytes` from the client, and looks at what can be looked at.
    pub(super) fn push(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.raw.extend_from_slice(bytes);
        self.digest()
    }

    /// The client has ended: what is left of a frame cut short goes as it is,
    /// so the server sees the connection end in it.
    pub(super) fn end(&mut self) {
        let rest = self.raw.split();
        self.ready.unsplit(rest);
    }

    /// At most `max` of the bytes ready for the server, if there are any.
    pub(super) fn take(&mut self, max: usize) -> Option<BytesMut> {
        if self.ready.is_empty() {
            return None;
        }
        let n = self.ready.len().min(max);
        Some(self.ready.split_to(n))
    }

    /// Moves what can be looked at from `raw` to `ready`.
    fn digest(&mut self) -> io::Result<()> {
        loop {
            match self.state {
                State::Through => {
                    let all = self.raw.split();
                    self.ready.unsplit(all);
                    return Ok(());
                }
                State::Preface => {
                    let n = self.raw.len().min(PREFACE.len());
                    if self.raw[..n] != PREFACE[..n] {
                        self.state = State::Through;
                    } else if n == PREFACE.len() {
                        let p = self.raw.split_to(n);
                        self.ready.unsplit(p);
                        self.state = State::Frames;
                    } else {
                        return Ok(());
                    }
                }
                State::Frames => {
                    if !self.frame()? {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Takes one whole frame from `raw`, if there is one.
    fn frame(&mut self) -> io::Result<bool> {
        if self.raw.len() < FRAME_HEAD {
            return Ok(false);
        }
        let h = &self.raw[..FRAME_HEAD];
        let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
        let (kind, flags) = (h[3], h[4]);
        let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        if self.raw.len() < FRAME_HEAD + len {
            return Ok(false);
        }
        if self.block.is_none() && kind != HEADERS {
            let f = self.raw.split_to(FRAME_HEAD + len);
            self.ready.unsplit(f);
            return Ok(true);
        }
        self.raw.advance(FRAME_HEAD);
        let payload = self.raw.split_to(len);
        match self.block.as_mut() {
            None => {
                let mut p = &payload[..];
                let pad = if flags & PADDED != 0 {
                    let n = *p
                        .first()
                        .ok_or_else(|| broken("HEADERS without its padding length"))?;
                    p = &p[1..];
                    n as usize
                } else {
                    0
                };
                let priority = if flags & PRIORITY != 0 {
                    let pr: [u8; 5] = p
                        .get(..5)
                        .and_then(|s| s.try_into().ok())
                        .ok_or_else(|| broken("HEADERS shorter than its priority"))?;
                    p = &p[5..];
                    Some(pr)
                } else {
                    None
                };
                let keep = p
                    .len()
                    .checked_sub(pad)
                    .ok_or_else(|| broken("HEADERS shorter than its padding"))?;
                let fragment = p[..keep].to_vec();
                self.block = Some(Block {
                    stream,
                    end_stream: flags & END_STREAM != 0,
                    priority,
                    fragment,
                });
            }
            Some(b) => {
                if kind != CONTINUATION || stream != b.stream {
                    return Err(broken("a header block not continued by its CONTINUATION"));
                }
                b.fragment.extend_from_slice(&payload);
                if b.fragment.len() > MAX_BLOCK {
                    return Err(broken("a header block over 1 MiB"));
                }
            }
        }
        if flags & END_HEADERS != 0 {
            let b = self.block.take().expect("a block gathered above");
            self.reencode(b)?;
        }
        Ok(true)
    }

    /// Decodes block `b`, puts `localhost` for an authority that is not one,
    /// and writes it to `ready` again as HEADERS and CONTINUATION frames.
    fn reencode(&mut self, b: Block) -> io::Result<()> {
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        self.decoder
            .decode_with_cb(&b.fragment, |name, value| {
                let value = if &name[..] == b":authority" && !is_authority(&value) {
                    LOCALHOST.to_vec()
                } else {
                    value.into_owned()
                };
                fields.push((name.into_owned(), value));
            })
            .map_err(|e| broken(&format!("a header block that does not decode: {e:?}")))?;
        let block = self
            .encoder
            .encode(fields.iter().map(|(n, v)| (&n[..], &v[..])));
        let mut first = Vec::with_capacity(5 + block.len().min(MAX_FRAME));
        let mut flags = 0;
        if let Some(p) = b.priority {
            first.extend_from_slice(&p);
            flags |= PRIORITY;
        }
        if b.end_stream {
            flags |= END_STREAM;
        }
        let room = MAX_FRAME - first.len();
        let (head, mut rest) = block.split_at(block.len().min(room));
        first.extend_from_slice(head);
        let mut kind = HEADERS;
        let mut payload = first;
        loop {
            let last = rest.is_empty();
            let f = flags | if last { END_HEADERS } else { 0 };
            self.put_frame(kind, f, b.stream, &payload);
            if last {
                return Ok(());
            }
            let (next, after) = rest.split_at(rest.len().min(MAX_FRAME));
            payload = next.to_vec();
            rest = after;
            kind = CONTINUATION;
            flags = 0;
        }
    }

    fn put_frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        let len = (payload.len() as u32).to_be_bytes();
        self.ready.extend_from_slice(&len[1..]);
        self.ready.extend_from_slice(&[kind, flags]);
        self.ready.extend_from_slice(&stream.to_be_bytes());
        self.ready.extend_from_slice(payload);
    }
}

fn is_authority(v: &[u8]) -> bool {
    http::uri::Authority::try_from(v).is_ok()
}

fn broken(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("HTTP/2 from the client: {what}"),
    )
}
