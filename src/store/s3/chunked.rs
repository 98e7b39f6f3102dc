//! Chunked transfer coding (RFC 9112 7.1), decoded for the small bodies that come
//! that way to the socket transport: S3's error answers.
//!
//! Pure: bytes in, what they come to out, so the socket reads a body by calling
//! it on what has arrived so far, and the fuzz target calls it on every prefix.
//! Sizes come from the peer: every sum is checked, and a body that would pass
//! the caller's bound is refused as soon as a chunk's size line says so.

/// What a chunked body's bytes so far come to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunks {
    /// The body, decoded (bytes after its last CRLF are not looked at).
    Whole(Vec<u8>),
    /// More bytes are needed to tell.
    Partial,
    /// Not a chunked body, or one longer than the bound.
    Bad,
}

/// Decodes a chunked body (RFC 9112 7.1) from its raw bytes, trailers skipped;
/// a body of more than `max` bytes is [`Chunks::Bad`].
pub fn dechunk(raw: &[u8], max: usize) -> Chunks {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        // chunk-size = 1*HEXDIG: httparse takes a line with no digit as 0.
        match raw.get(at) {
            None => return Chunks::Partial,
            Some(b) if !b.is_ascii_hexdigit() => return Chunks::Bad,
            Some(_) => {}
        }
        let (start, size) = match httparse::parse_chunk_size(&raw[at..]) {
            Ok(httparse::Status::Complete((n, size))) => (at + n, size),
            Ok(httparse::Status::Partial) => return Chunks::Partial,
            Err(_) => return Chunks::Bad,
        };
        if size == 0 {
            return trailers(raw, start, out);
        }
        // The body so far plus this chunk, within the bound (checked in u64:
        // the size line says what it likes).
        let fits = (out.len() as u64)
            .checked_add(size)
            .is_some_and(|n| n <= max as u64);
        if !fits {
            return Chunks::Bad;
        }
        // `size` is at most `max`, a usize, from here on.
        let size = size as usize;
        let Some(end) = start.checked_add(size) else {
            return Chunks::Bad;
        };
        let Some(crlf) = raw.get(end..).and_then(|rest| rest.get(..2)) else {
            return Chunks::Partial;
        };
        if crlf != b"\r\n" {
            return Chunks::Bad;
        }
        out.extend_from_slice(&raw[start..end]);
        at = end + 2;
    }
}

/// The trailer lines from `line` on, each ended by CRLF, then an empty line.
fn trailers(raw: &[u8], mut line: usize, out: Vec<u8>) -> Chunks {
    loop {
        let rest = &raw[line..];
        let Some(end) = rest.windows(2).position(|w| w == b"\r\n") else {
            return Chunks::Partial;
        };
        if end == 0 {
            return Chunks::Whole(out);
        }
        line += end + 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 64 << 10;

    #[test]
    fn chunked_bodies_decode_whole_or_wait_for_more() {
        let raw = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nx-trailer: 1\r\n\r\n";
        assert_eq!(dechunk(raw, MAX), Chunks::Whole(b"hello world".to_vec()));
        for cut in 0..raw.len() {
            assert_eq!(dechunk(&raw[..cut], MAX), Chunks::Partial, "cut at {cut}");
        }
        assert_eq!(dechunk(b"5\r\nhelloXX0\r\n\r\n", MAX), Chunks::Bad);
        assert_eq!(dechunk(b"zz\r\n", MAX), Chunks::Bad);
        assert_eq!(dechunk(b"0\r\n\r\n", MAX), Chunks::Whole(vec![]));
    }

    #[test]
    fn a_chunk_size_near_the_top_of_u64_is_refused_not_overflowed() {
        // The size a hostile node sent: start + size fits a u64, + 2 did not.
        for line in ["ffffffffffffffed", "ffffffffffffffff", "fffffffffffffffe"] {
            let raw = format!("{line}\r\nabc");
            assert_eq!(dechunk(raw.as_bytes(), MAX), Chunks::Bad, "{line}");
            // Unbounded: waiting for bytes that cannot come, or refused.
            let unbounded = dechunk(raw.as_bytes(), usize::MAX);
            assert!(matches!(unbounded, Chunks::Partial | Chunks::Bad), "{line}");
        }
        // Seventeen digits: httparse refuses them itself.
        assert_eq!(dechunk(b"10000000000000000\r\n", usize::MAX), Chunks::Bad);
    }

    #[test]
    fn a_body_past_the_bound_is_refused_at_the_size_line_that_passes_it() {
        assert_eq!(dechunk(b"4\r\nabcd\r\n", 5), Chunks::Partial);
        assert_eq!(dechunk(b"4\r\nabcd\r\n2\r\n", 5), Chunks::Bad);
        assert_eq!(
            dechunk(b"4\r\nabcd\r\n1\r\ne\r\n0\r\n\r\n", 5),
            Chunks::Whole(b"abcde".to_vec())
        );
    }

    #[test]
    fn a_size_line_without_a_digit_is_refused() {
        assert_eq!(dechunk(b"\r\n\r\n", MAX), Chunks::Bad);
        assert_eq!(dechunk(b";ext\r\n\r\n", MAX), Chunks::Bad);
        assert_eq!(dechunk(b" 0\r\n\r\n", MAX), Chunks::Bad);
    }
}
