//! The block file format: a header naming the block a file holds and an xxh3
//! checksum of its data, then the data. Decoding never panics, whatever the
//! bytes, so a torn, corrupted or foreign file is an error, never a crash.

use xxhash_rust::xxh3::xxh3_64;

use crate::blocks::BlockKey;

const MAGIC: &[u8; 8] = b"SHOALBK1";
/// 2: the block size is part of the header (version 1 files are removed at start).
const VERSION: u32 = 2;
/// Fixed part: magic, version, header_len, data_len, checksum, block_size, index.
const FIXED: usize = 8 + 4 + 4 + 8 + 8 + 8 + 8;
/// No identity is longer than this; a larger header length is corruption.
pub(super) const MAX_HEADER: usize = 64 * 1024;

/// Why bytes are not the block they should be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("file shorter than a block header")]
    Short,
    #[error("not a shoal block file")]
    NotBlockFile,
    #[error("block format version {0} is not {VERSION}")]
    Version(u32),
    /// Larger than the bytes at hand (or than any header may be).
    #[error("bad header length {0}")]
    HeaderLength(usize),
    #[error("header fields are malformed: {0}")]
    Fields(&'static str),
    #[error("file holds another block")]
    OtherBlock,
    #[error("data is {got} bytes, header says {want}")]
    DataLength { got: u64, want: u64 },
    #[error("checksum mismatch")]
    Checksum,
}

/// A decoded block header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub key: BlockKey,
    pub header_len: usize,
    pub data_len: u64,
    pub checksum: u64,
}

pub fn encode_header(key: &BlockKey, data: &[u8]) -> Vec<u8> {
    let parts = [
        key.bucket.as_bytes(),
        key.key.as_bytes(),
        key.etag.as_bytes(),
    ];
    let header_len = FIXED + parts.iter().map(|p| 4 + p.len()).sum::<usize>();
    let mut h = Vec::with_capacity(header_len);
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&VERSION.to_le_bytes());
    h.extend_from_slice(&(header_len as u32).to_le_bytes());
    h.extend_from_slice(&(data.len() as u64).to_le_bytes());
    h.extend_from_slice(&xxh3_64(data).to_le_bytes());
    h.extend_from_slice(&key.block_size.to_le_bytes());
    h.extend_from_slice(&key.index.to_le_bytes());
    for p in parts {
        h.extend_from_slice(&(p.len() as u32).to_le_bytes());
        h.extend_from_slice(p);
    }
    h
}

/// The data of a whole block file, if the file is `key`'s block and intact. Never
/// panics, whatever the bytes.
pub fn decode_block<'a>(buf: &'a [u8], key: &BlockKey) -> Result<&'a [u8], DecodeError> {
    let h = decode_header(buf)?;
    if &h.key != key {
        return Err(DecodeError::OtherBlock);
    }
    let data = &buf[h.header_len..];
    if data.len() as u64 != h.data_len {
        return Err(DecodeError::DataLength {
            got: data.len() as u64,
            want: h.data_len,
        });
    }
    if xxh3_64(data) != h.checksum {
        return Err(DecodeError::Checksum);
    }
    Ok(data)
}

/// Decodes a header from the start of `buf`. Never panics, whatever the bytes.
pub fn decode_header(buf: &[u8]) -> Result<Header, DecodeError> {
    if buf.len() < FIXED {
        return Err(DecodeError::Short);
    }
    if &buf[..8] != MAGIC {
        return Err(DecodeError::NotBlockFile);
    }
    let u32_at = |i: usize| u32::from_le_bytes(buf[i..i + 4].try_into().unwrap());
    let u64_at = |i: usize| u64::from_le_bytes(buf[i..i + 8].try_into().unwrap());
    if u32_at(8) != VERSION {
        return Err(DecodeError::Version(u32_at(8)));
    }
    let header_len = u32_at(12) as usize;
    if !(FIXED..=MAX_HEADER).contains(&header_len) || header_len > buf.len() {
        return Err(DecodeError::HeaderLength(header_len));
    }
    let data_len = u64_at(16);
    let checksum = u64_at(24);
    let block_size = u64_at(32);
    let index = u64_at(40);
    let mut at = FIXED;
    let mut parts = Vec::with_capacity(3);
    for _ in 0..3 {
        if at + 4 > header_len {
            return Err(DecodeError::Fields("header ends inside a field length"));
        }
        let n = u32_at(at) as usize;
        at += 4;
        if n > header_len - at {
            return Err(DecodeError::Fields("header field runs past the header"));
        }
        let s = std::str::from_utf8(&buf[at..at + n])
            .map_err(|_| DecodeError::Fields("header field is not UTF-8"))?;
        parts.push(s);
        at += n;
    }
    if at != header_len {
        return Err(DecodeError::Fields(
            "header length does not match its fields",
        ));
    }
    Ok(Header {
        key: BlockKey::new(parts[0], parts[1], parts[2], block_size, index),
        header_len,
        data_len,
        checksum,
    })
}
