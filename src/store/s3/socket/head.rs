//! An answer's head, read as its bytes arrive and parsed by RFC 9112's rules: its
//! status, headers, how its body is framed and whether its connection can carry
//! another request.
//!
//! Pure: [`HeadReader`] is handed the bytes a socket gave, in whatever pieces,
//! and says when a head is whole; the socket loop and the fuzz target both feed
//! it. Whatever the framing cannot vouch for is refused (a protocol error the
//! caller fails over on), never guessed at: two different `Content-Length`s, one
//! that is not all digits, `Transfer-Encoding` beside it, a coding other than
//! `chunked`, a `101`. Interim answers (`100 Continue`, `103 Early Hints`) are
//! skipped: the head is the final answer's.

use http::{HeaderMap, HeaderName, HeaderValue};

/// The most an answer's heads (interim ones included) may take.
pub const MAX_HEAD: usize = 64 << 10;
/// A connection's buffer starts this large (a request, or an answer's head and
/// the first bytes of its body).
pub const BUF: usize = 4096;
/// Header lines one head may have.
const MAX_HEADERS: usize = 64;

/// How an answer's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Length(u64),
    Chunked,
}

/// A final answer's head.
#[derive(Debug, Clone, PartialEq)]
pub struct Head {
    pub status: u16,
    pub headers: HeaderMap,
    pub framing: Framing,
    /// Whether the connection may carry another request after this answer
    /// (HTTP/1.1, not closed, and a body framed by its length).
    pub reusable: bool,
    /// Where the body starts in the bytes read: after this head and every
    /// interim one before it.
    pub body_at: usize,
}

/// Why an answer's head is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("a malformed answer: {0}")]
    Malformed(httparse::Error),
    #[error("an answer's head over {MAX_HEAD} bytes")]
    TooLong,
    #[error("an answer with status {0}")]
    Status(u16),
    #[error("a 101 Switching Protocols answer to a GET that asked for none")]
    Switching,
    #[error("a bad header name {0:?}")]
    HeaderName(String),
    #[error("a bad value of header {0}")]
    HeaderValue(String),
    #[error("a bad Content-Length {0:?}")]
    BadLength(String),
    #[error("Content-Lengths that disagree: {0} and {1}")]
    ConflictingLengths(u64, u64),
    #[error("both Transfer-Encoding and Content-Length")]
    BothFramings,
    #[error("a {status} answer with Transfer-Encoding {coding:?} (a success's body is read by its Content-Length; only an error's may come chunked)")]
    Coding { status: u16, coding: String },
    #[error("a {0} answer with no Content-Length (a body is read by its Content-Length)")]
    NoLength(u16),
    #[error("{early} bytes after a head announcing {length}")]
    PastBody { early: usize, length: u64 },
}

/// An answer's head as its bytes arrive, in the connection's buffer (which then
/// holds the first bytes of the body).
pub struct HeadReader {
    buf: Vec<u8>,
    len: usize,
}

impl HeadReader {
    /// Reads into `buf` (its whole capacity: its bytes are read over, never
    /// read before they are written).
    pub fn new(mut buf: Vec<u8>) -> HeadReader {
        buf.resize(buf.capacity().max(BUF), 0);
        HeadReader { buf, len: 0 }
    }

    /// Where the next bytes go.
    pub fn room(&mut self) -> &mut [u8] {
        &mut self.buf[self.len..]
    }

    /// Bytes read so far.
    pub fn received(&self) -> usize {
        self.len
    }

    /// The next `n` bytes are in [`Self::room`]: the head, once it is whole.
    /// A head whose body already overflows its length is refused here, as one
    /// longer than [`MAX_HEAD`] is.
    pub fn filled(&mut self, n: usize) -> Result<Option<Head>, HeadError> {
        self.len = self.len.saturating_add(n).min(self.buf.len());
        let bytes = &self.buf[..self.len];
        match parse(bytes)? {
            Some(head) => {
                let early = bytes.len() - head.body_at;
                match head.framing {
                    Framing::Length(length) if early as u64 > length => {
                        Err(HeadError::PastBody { early, length })
                    }
                    _ => Ok(Some(head)),
                }
            }
            None if self.len == self.buf.len() => {
                if self.buf.len() >= MAX_HEAD {
                    return Err(HeadError::TooLong);
                }
                let more = (self.buf.len() * 2).min(MAX_HEAD);
                self.buf.resize(more, 0);
                Ok(None)
            }
            None => Ok(None),
        }
    }

    /// The buffer and how much of it was read.
    pub fn into_parts(self) -> (Vec<u8>, usize) {
        (self.buf, self.len)
    }
}

/// The final answer's head in `bytes` (interim answers before it skipped), or
/// `None` while it is not whole.
pub fn parse(bytes: &[u8]) -> Result<Option<Head>, HeadError> {
    let mut at = 0;
    loop {
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut head = httparse::Response::new(&mut slots);
        let n = match head.parse(&bytes[at..]).map_err(HeadError::Malformed)? {
            httparse::Status::Complete(n) => n,
            httparse::Status::Partial => return Ok(None),
        };
        // httparse gives a code once the head is whole.
        let status = head.code.unwrap_or(0);
        match status {
            101 => return Err(HeadError::Switching),
            100..=199 => {
                at += n;
                continue;
            }
            200..=599 => {}
            s => return Err(HeadError::Status(s)),
        }
        let headers = header_map(&head)?;
        let framing = framing(status, head.version == Some(1), &headers)?;
        let close =
            tokens(&headers, http::header::CONNECTION).any(|t| t.eq_ignore_ascii_case("close"));
        return Ok(Some(Head {
            status,
            // A chunked body is read only as far as its last chunk: what may
            // follow is not looked for.
            reusable: head.version == Some(1) && !close && framing != Framing::Chunked,
            headers,
            framing,
            body_at: at + n,
        }));
    }
}

fn header_map(head: &httparse::Response<'_, '_>) -> Result<HeaderMap, HeadError> {
    let mut headers = HeaderMap::with_capacity(head.headers.len());
    for h in head.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| HeadError::HeaderName(h.name.to_owned()))?;
        let value = HeaderValue::from_bytes(h.value)
            .map_err(|_| HeadError::HeaderValue(name.to_string()))?;
        headers.append(name, value);
    }
    Ok(headers)
}

/// How the body of a `status` answer with `headers` ends (RFC 9112 6.3).
fn framing(status: u16, http11: bool, headers: &HeaderMap) -> Result<Framing, HeadError> {
    // No body, whatever the header fields say.
    if status == 204 || status == 304 {
        return Ok(Framing::Length(0));
    }
    let length = content_length(headers)?;
    if headers.contains_key(http::header::TRANSFER_ENCODING) {
        if length.is_some() {
            return Err(HeadError::BothFramings);
        }
        let codings: Vec<&str> = tokens(headers, http::header::TRANSFER_ENCODING).collect();
        let chunked = matches!(codings[..], [c] if c.eq_ignore_ascii_case("chunked"));
        // A success's body is read by its length; an HTTP/1.0 answer has no
        // transfer codings.
        if !chunked || (200..300).contains(&status) || !http11 {
            return Err(HeadError::Coding {
                status,
                coding: codings.join(", "),
            });
        }
        return Ok(Framing::Chunked);
    }
    length
        .map(Framing::Length)
        .ok_or(HeadError::NoLength(status))
}

/// The one length every `Content-Length` field (and every member of a list in
/// one) says, each all digits; `None` without any.
fn content_length(headers: &HeaderMap) -> Result<Option<u64>, HeadError> {
    let mut length = None;
    for v in headers.get_all(http::header::CONTENT_LENGTH) {
        let bad = || HeadError::BadLength(String::from_utf8_lossy(v.as_bytes()).into_owned());
        for member in v.as_bytes().split(|b| *b == b',') {
            let digits = member.trim_ascii();
            if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return Err(bad());
            }
            let n = std::str::from_utf8(digits)
                .ok()
                .and_then(|d| d.parse::<u64>().ok())
                .ok_or_else(bad)?;
            match length {
                Some(l) if l != n => return Err(HeadError::ConflictingLengths(l, n)),
                _ => length = Some(n),
            }
        }
    }
    Ok(length)
}

/// The comma-separated members of every `name` field, trimmed, empty ones left
/// out (RFC 9110 5.6.1).
fn tokens(headers: &HeaderMap, name: HeaderName) -> impl Iterator<Item = &str> {
    headers
        .get_all(name)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Result<Option<Head>, HeadError> {
        parse(text.as_bytes())
    }

    #[test]
    fn a_plain_answer_is_framed_by_its_length() {
        let text = "HTTP/1.1 206 Partial Content\r\ncontent-length: 5\r\netag: \"e\"\r\n\r\nhel";
        let h = head(text).unwrap().unwrap();
        assert_eq!(
            (h.status, h.framing, h.reusable),
            (206, Framing::Length(5), true)
        );
        assert_eq!(&text[h.body_at..], "hel");
        assert_eq!(h.headers["etag"], "\"e\"");
        assert!(head("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n")
            .unwrap()
            .is_none());
        let h =
            head("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nconnection: keep-alive, Close\r\n\r\n")
                .unwrap()
                .unwrap();
        assert!(!h.reusable);
        let h = head("HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!h.reusable);
    }

    #[test]
    fn content_lengths_that_disagree_or_are_not_all_digits_are_refused() {
        let two = "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n";
        assert_eq!(head(two), Err(HeadError::ConflictingLengths(5, 6)));
        let list = "HTTP/1.1 200 OK\r\ncontent-length: 5, 6\r\n\r\n";
        assert_eq!(head(list), Err(HeadError::ConflictingLengths(5, 6)));
        // The same length twice says one thing.
        let same = "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 5,5\r\n\r\n";
        assert_eq!(head(same).unwrap().unwrap().framing, Framing::Length(5));
        for bad in [
            "+5",
            "-1",
            "5 x",
            "0x5",
            "",
            " , ",
            "5,",
            "99999999999999999999",
        ] {
            let text = format!("HTTP/1.1 200 OK\r\ncontent-length: {bad}\r\n\r\n");
            assert!(
                matches!(head(&text), Err(HeadError::BadLength(_))),
                "{bad:?}: {:?}",
                head(&text)
            );
        }
    }

    #[test]
    fn transfer_encoding_beside_a_length_or_on_a_success_is_refused() {
        let both = "HTTP/1.1 500 x\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n";
        assert_eq!(head(both), Err(HeadError::BothFramings));
        let ok = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
        assert!(matches!(
            head(ok),
            Err(HeadError::Coding { status: 200, .. })
        ));
        let gzip = "HTTP/1.1 500 x\r\ntransfer-encoding: gzip, chunked\r\n\r\n";
        assert!(matches!(head(gzip), Err(HeadError::Coding { .. })));
        let old = "HTTP/1.0 500 x\r\ntransfer-encoding: chunked\r\n\r\n";
        assert!(matches!(head(old), Err(HeadError::Coding { .. })));
        let error = "HTTP/1.1 500 x\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\n";
        let h = head(error).unwrap().unwrap();
        assert_eq!((h.framing, h.body_at), (Framing::Chunked, error.len() - 3));
        assert!(!h.reusable);
        let none = "HTTP/1.1 500 x\r\n\r\n";
        assert_eq!(head(none), Err(HeadError::NoLength(500)));
    }

    #[test]
    fn interim_answers_are_skipped_and_101_refused() {
        let text = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n\
                    HTTP/1.1 206 Partial Content\r\ncontent-length: 2\r\n\r\nab";
        let h = head(text).unwrap().unwrap();
        assert_eq!((h.status, h.framing), (206, Framing::Length(2)));
        assert_eq!(&text[h.body_at..], "ab");
        assert!(!h.headers.contains_key("link"));
        assert!(head("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 2")
            .unwrap()
            .is_none());
        assert_eq!(
            head("HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n"),
            Err(HeadError::Switching)
        );
        assert_eq!(head("HTTP/1.1 099 x\r\n\r\n"), Err(HeadError::Status(99)));
    }

    #[test]
    fn bodiless_statuses_have_no_body_whatever_their_length() {
        let text = "HTTP/1.1 304 Not Modified\r\ncontent-length: 100\r\n\r\n";
        assert_eq!(head(text).unwrap().unwrap().framing, Framing::Length(0));
    }

    #[test]
    fn a_reader_fed_in_pieces_finds_the_head_and_refuses_a_body_past_its_length() {
        let text = b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nabc";
        for piece in 1..text.len() {
            let mut r = HeadReader::new(Vec::new());
            let mut found = None;
            for chunk in text.chunks(piece) {
                r.room()[..chunk.len()].copy_from_slice(chunk);
                if let Some(h) = r.filled(chunk.len()).unwrap() {
                    found = Some(h);
                    break;
                }
            }
            assert_eq!(found.unwrap().body_at, text.len() - 3, "pieces of {piece}");
        }
        let mut r = HeadReader::new(Vec::new());
        let past = b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nabcHTTP/1.1";
        r.room()[..past.len()].copy_from_slice(past);
        assert_eq!(
            r.filled(past.len()),
            Err(HeadError::PastBody {
                early: 11,
                length: 3
            })
        );
    }

    #[test]
    fn a_head_that_never_ends_is_refused_at_the_bound() {
        let mut r = HeadReader::new(Vec::new());
        let start = b"HTTP/1.1 200 OK\r\nx-pad: ";
        r.room()[..start.len()].copy_from_slice(start);
        assert_eq!(r.filled(start.len()), Ok(None));
        let result = loop {
            let room = r.room();
            let n = room.len().min(1000);
            room[..n].fill(b'a');
            match r.filled(n) {
                Ok(None) => {}
                other => break other,
            }
        };
        assert_eq!(result, Err(HeadError::TooLong));
        assert_eq!(r.received(), MAX_HEAD);
    }
}
