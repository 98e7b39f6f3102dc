//! Reading a journal's bytes back: its header (if it has one), then every record
//! of its live region in order. A record that is whole but wrong fails the whole
//! replay; only a record cut short at the very end (its writer killed in the
//! middle of the write) is left out.

use super::record::{unframe, Bad, Framed, Record};
use super::state::State;

/// The first bytes of a journal with a header. A journal without one (written
/// before headers were) starts with a record, whose length's high bytes are 0.
pub(super) const MAGIC: [u8; 8] = *b"SHOALJN2";
/// The header: the magic, then where the live records start and (if not 0)
/// where they stop, each a little-endian `u64`.
pub(super) const HEADER_LEN: usize = 24;

/// Why a journal cannot be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("cannot read the journal: {0}")]
    Io(#[from] std::io::Error),
    #[error("its header is damaged: {0}")]
    Header(String),
    #[error("the record at byte {at} is damaged: {why}")]
    Record { at: u64, why: Bad },
    #[error("a snapshot begins at byte {at} inside another")]
    NestedSnapshot { at: u64 },
    #[error("a snapshot ends at byte {at} that never began")]
    UnopenedSnapshot { at: u64 },
}

/// What a journal's bytes add up to.
#[derive(Debug)]
pub struct Replayed {
    pub state: State,
    /// Where its live records start, and where the last whole one ends: the next
    /// record goes there.
    pub start: usize,
    pub end: usize,
    /// Bytes past `end` that are a record cut short (a write killed midway).
    pub torn: usize,
    /// It has no header (a journal from before headers).
    pub headerless: bool,
}

/// Replays `buf`, a whole journal.
pub fn replay(buf: &[u8]) -> Result<Replayed, ReplayError> {
    let (start, stop, headerless) = header(buf)?;
    let live = &buf[..stop];
    let mut state = State::default();
    // A snapshot being read, and where it began.
    let mut snapshot: Option<(State, usize)> = None;
    let mut at = start;
    while at < live.len() {
        let (r, next) = match unframe(live, at) {
            Framed::Record(r, next) => (r, next),
            Framed::Torn => break,
            Framed::Bad(why) => return Err(ReplayError::Record { at: at as u64, why }),
        };
        match r {
            Record::SnapshotBegin if snapshot.is_some() => {
                return Err(ReplayError::NestedSnapshot { at: at as u64 })
            }
            Record::SnapshotBegin => snapshot = Some((State::default(), at)),
            Record::SnapshotEnd => match snapshot.take() {
                Some((s, _)) => state = s,
                None => return Err(ReplayError::UnopenedSnapshot { at: at as u64 }),
            },
            r => {
                let into = snapshot.as_mut().map_or(&mut state, |s| &mut s.0);
                into.apply(r)
                    .map_err(|why| ReplayError::Record { at: at as u64, why })?;
            }
        }
        at = next;
    }
    // A snapshot without its end was cut short as it was written (it is written
    // whole, in one write, at the end): the state before it stands.
    let end = snapshot.map_or(at, |(_, began)| began);
    Ok(Replayed {
        state,
        start,
        end,
        torn: live.len() - end,
        headerless,
    })
}

/// Where the live records start and stop, and whether there is no header.
fn header(buf: &[u8]) -> Result<(usize, usize, bool), ReplayError> {
    if !buf.starts_with(&MAGIC) {
        return Ok((0, buf.len(), true));
    }
    let bad = |why: String| Err(ReplayError::Header(why));
    let Some(h) = buf.get(..HEADER_LEN) else {
        return bad(format!("{} bytes, of {HEADER_LEN}", buf.len()));
    };
    let word = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().expect("8 bytes"));
    let (start, stop) = (word(8), word(16));
    let len = buf.len() as u64;
    if start < HEADER_LEN as u64 || start > len {
        return bad(format!("records start at byte {start} of {len}"));
    }
    let stop = match stop {
        0 => len,
        s if s < start || s > len => {
            return bad(format!("records from byte {start} stop at {s}, of {len}"))
        }
        s => s,
    };
    Ok((start as usize, stop as usize, false))
}

/// The header for records from `start` to `stop` (0: to the end of the file).
pub(super) fn header_bytes(start: u64, stop: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..16].copy_from_slice(&start.to_le_bytes());
    h[16..].copy_from_slice(&stop.to_le_bytes());
    h
}
