//! What a socket gives for an answer: its head (interim answers, a final one)
//! and the start of its body, or a chunked body, in whatever pieces the network
//! cuts them into. The first byte of an input seeds the cut; the rest is what
//! arrives. Whatever the cut, the parse must come to what it comes to on the
//! whole input, and never panic.

use shoal::store::s3::parse::{answer_head, dechunk, Chunks, Framing, HeadError, HeadReader};

/// The sizes the bytes arrive in, from `seed`: one byte at a time, a prime
/// stride, or a few large reads.
fn pieces(seed: u8) -> impl Iterator<Item = usize> {
    let stride = match seed % 4 {
        0 => 1,
        1 => 7,
        2 => 1 + seed as usize,
        _ => 4096,
    };
    // Every few reads one is a byte long, as a segment boundary would cut it.
    (0..).map(move |i| {
        if seed & 0x10 != 0 && i % 3 == 2 {
            1
        } else {
            stride
        }
    })
}

/// An answer's head and the start of its body, fed to the incremental reader
/// the socket uses in pieces cut by the first byte: the head it finds (or its
/// refusal) is the one the whole input gives, a body it lets through fits its
/// length, and no head the reader accepts breaks the rules the client counts
/// on (a success is framed by its length, never chunked; no interim answer
/// is final).
pub fn http_head(data: &[u8]) {
    let Some((&seed, bytes)) = data.split_first() else {
        return;
    };
    let whole = answer_head(bytes);
    let mut reader = HeadReader::new(Vec::with_capacity(seed as usize * 64));
    let mut at = 0;
    let mut sizes = pieces(seed);
    let found = loop {
        if at == bytes.len() {
            break None;
        }
        let room = reader.room();
        assert!(!room.is_empty(), "the reader left no room");
        let n = sizes.next().unwrap().min(room.len()).min(bytes.len() - at);
        room[..n].copy_from_slice(&bytes[at..at + n]);
        at += n;
        match reader.filled(n) {
            Ok(None) => {}
            r => break Some(r),
        }
    };
    assert_eq!(reader.received(), at);
    match found {
        // Every byte arrived and no head is whole: none is in the input either.
        None => assert_eq!(whole, Ok(None)),
        Some(Ok(Some(head))) => {
            assert_eq!(whole.as_ref(), Ok(&Some(head.clone())), "cut by {seed}");
            assert!(head.body_at <= at);
            assert!((200..600).contains(&head.status), "{}", head.status);
            let early = (at - head.body_at) as u64;
            match head.framing {
                Framing::Length(n) => assert!(early <= n, "{early} early bytes of {n}"),
                Framing::Chunked => {
                    assert!(!(200..300).contains(&head.status));
                    assert!(!head.reusable, "a chunked answer's connection is not kept");
                    chunked_body(seed, &bytes[head.body_at..]);
                }
            }
        }
        Some(Err(HeadError::PastBody { early, length })) => {
            let head = whole
                .expect("the whole input has the head the pieces had")
                .expect("a whole head");
            assert_eq!(head.framing, Framing::Length(length));
            assert_eq!(early, at - head.body_at);
            assert!(early as u64 > length);
        }
        // The bound is the reader's, not the parse's: what it read holds no head.
        Some(Err(HeadError::TooLong)) => assert_eq!(answer_head(&bytes[..at]), Ok(None)),
        Some(Err(e)) => assert_eq!(whole, Err(e), "cut by {seed}"),
        Some(Ok(None)) => unreachable!("the loop goes on while the head is partial"),
    }
}

/// A chunked body, decoded on every prefix of the input (as the socket does
/// as bytes arrive) with a bound the first byte picks: each prefix is partial
/// or comes to what the whole comes to, and a decoded body is within the bound.
pub fn chunked(data: &[u8]) {
    let Some((&seed, bytes)) = data.split_first() else {
        return;
    };
    chunked_body(seed, bytes);
}

fn chunked_body(seed: u8, bytes: &[u8]) {
    let max = match seed % 3 {
        0 => 64 << 10,
        1 => seed as usize,
        _ => usize::MAX,
    };
    let whole = dechunk(bytes, max);
    if let Chunks::Whole(body) = &whole {
        assert!(body.len() <= max);
        assert!(
            body.len() < bytes.len(),
            "a body is shorter than its coding"
        );
        // The same bytes as one chunk decode to themselves.
        let mut again = format!("{:x}\r\n", body.len()).into_bytes();
        again.extend_from_slice(body);
        again.extend_from_slice(b"\r\n0\r\n\r\n");
        if !body.is_empty() {
            assert_eq!(dechunk(&again, max), whole);
        }
    }
    let mut decided = false;
    for cut in 0..=bytes.len() {
        match dechunk(&bytes[..cut], max) {
            Chunks::Partial => assert!(!decided, "partial again after a decision at {cut}"),
            r => {
                assert_eq!(r, whole, "the first {cut} bytes");
                decided = true;
            }
        }
    }
}
