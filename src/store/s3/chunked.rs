//! Chunked transfer coding (RFC 9112 7.1), decoded for the small bodies that come
//! that way to the socket transport: S3's error answers.

/// What a chunked body's bytes so far come to.
pub(super) enum Chunks {
    Whole(Vec<u8>),
    Partial,
    Bad,
}

/// Decodes a chunked body (RFC 9112 7.1) from its raw bytes, trailers skipped.
pub(super) fn dechunk(raw: &[u8]) -> Chunks {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let (start, size) = match httparse::parse_chunk_size(&raw[at..]) {
            Ok(httparse::Status::Complete((n, size))) => (at + n, size as usize),
            Ok(httparse::Status::Partial) => return Chunks::Partial,
            Err(_) => return Chunks::Bad,
        };
        if size == 0 {
            // Trailer lines, each ended by CRLF, then an empty line.
            let mut line = start;
            loop {
                let Some(end) = raw[line..].windows(2).position(|w| w == b"\r\n") else {
                    return Chunks::Partial;
                };
                if end == 0 {
                    return Chunks::Whole(out);
                }
                line += end + 2;
            }
        }
        let Some(end) = start.checked_add(size).filter(|e| e + 2 <= raw.len()) else {
            return Chunks::Partial;
        };
        if &raw[end..end + 2] != b"\r\n" {
            return Chunks::Bad;
        }
        out.extend_from_slice(&raw[start..end]);
        at = end + 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_decode_whole_or_wait_for_more() {
        let raw = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nx-trailer: 1\r\n\r\n";
        assert!(matches!(dechunk(raw), Chunks::Whole(b) if b == b"hello world"));
        for cut in 0..raw.len() {
            assert!(
                matches!(dechunk(&raw[..cut]), Chunks::Partial),
                "cut at {cut}"
            );
        }
        assert!(matches!(dechunk(b"5\r\nhelloXX0\r\n\r\n"), Chunks::Bad));
        assert!(matches!(dechunk(b"zz\r\n"), Chunks::Bad));
        assert!(matches!(dechunk(b"0\r\n\r\n"), Chunks::Whole(b) if b.is_empty()));
    }
}
