use std::os::fd::OwnedFd;
use std::time::{Duration, UNIX_EPOCH};

use shoal::store::ObjectMeta;

use super::record::frame;
use super::*;
use crate::kernel::Negotiated;

fn meta(etag: &str) -> ObjectMeta {
    ObjectMeta {
        size: 10,
        etag: etag.into(),
        last_modified: Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
        ..Default::default()
    }
}

const AGREED: Negotiated = Negotiated {
    minor: 40,
    flags: 1 << 13,
    offered: 1 << 39,
};

/// What a server writes: INIT, a directory and a file in it, the file open
/// (passed through a backing file), the directory open, and a second handle of
/// the file, closed.
fn records() -> Vec<Record> {
    vec![
        Record::Agreed(AGREED),
        Record::Inode {
            ino: 2,
            dir: true,
            path: "d/".into(),
        },
        Record::Inode {
            ino: 3,
            dir: false,
            path: "d/f\nodd".into(),
        },
        Record::PageVersion {
            ino: 3,
            etag: "e1".into(),
        },
        Record::File {
            fh: 7,
            ino: 3,
            meta: meta("e1"),
        },
        Record::Backing {
            ino: 3,
            id: 1,
            etag: "e1".into(),
        },
        Record::Passed {
            fh: 7,
            ino: 3,
            backed: true,
        },
        Record::Dir { fh: 8, ino: 2 },
        Record::File {
            fh: 9,
            ino: 3,
            meta: meta("e1"),
        },
        Record::Closed { fh: 9 },
    ]
}

fn check(s: &State) {
    assert_eq!(s.agreed, Some(AGREED));
    assert_eq!(s.inodes.len(), 2);
    assert_eq!(s.inodes[1].2, "d/f\nodd");
    assert_eq!(s.files.get(&7), Some(&(3, meta("e1"))));
    assert!(!s.files.contains_key(&9), "closed");
    assert_eq!(s.dirs.get(&8), Some(&2));
    assert_eq!(s.passed.get(&7), Some(&(3, true)));
    assert_eq!(s.backings.get(&3), Some(&(1, "e1".into())));
    assert_eq!(s.last_fh(), 8);
}

/// A fresh journal (as a keeper makes one) with `rs` appended.
fn written(rs: &[Record]) -> Journal {
    let j = Journal::create().unwrap();
    for r in rs {
        j.append(r);
    }
    j
}

/// A memory file holding `bytes`, as a keeper would hand it over.
fn memfd(bytes: &[u8]) -> OwnedFd {
    let j = Journal::create().unwrap();
    let fd = j.into_fd();
    let f = std::fs::File::from(fd);
    f.set_len(0).unwrap();
    f.write_all_at(bytes, 0).unwrap();
    f.into()
}

fn file_bytes(fd: &OwnedFd) -> Vec<u8> {
    read_all(&std::fs::File::from(fd.try_clone().unwrap())).unwrap()
}

#[test]
fn records_replay_and_a_takeover_compacts_them_in_the_same_file() {
    let j = written(&records());
    let bytes = j.bytes().unwrap();
    check(&replay(&bytes).unwrap().state);
    let fd = j.into_fd();
    let (taken, s) = Journal::open(fd.try_clone().unwrap()).unwrap();
    check(&s);
    // The same file, compacted: what another holder of it (a CSI driver's copy)
    // reads is the state, smaller.
    let after = file_bytes(&fd);
    assert!(
        after.len() < bytes.len(),
        "{} < {}",
        after.len(),
        bytes.len()
    );
    assert_eq!(replay(&after).unwrap().state, s);
    taken.append(&Record::Closed { fh: 7 });
    let s2 = replay(&file_bytes(&fd)).unwrap().state;
    assert!(s2.files.is_empty() && s2.passed.is_empty());
}

#[test]
fn every_prefix_of_a_journal_is_a_torn_write_and_replays_what_is_whole() {
    let rs = records();
    let j = written(&rs);
    let bytes = j.bytes().unwrap();
    // Where each record ends.
    let mut ends = vec![HEADER_LEN];
    for r in &rs {
        ends.push(ends.last().unwrap() + frame(r).len());
    }
    for cut in HEADER_LEN..=bytes.len() {
        let r = replay(&bytes[..cut]).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        let whole = ends.iter().rposition(|&e| e <= cut).unwrap();
        let mut want = State::default();
        for rec in &rs[..whole] {
            want.apply(rec.clone()).unwrap();
        }
        assert_eq!(r.state, want, "cut at {cut}");
        assert_eq!(r.end, ends[whole]);
        assert_eq!(r.torn, cut - ends[whole]);
    }
    // A successor cuts the torn part off before it appends.
    let cut = ends[4] + 5;
    let fd = memfd(&bytes[..cut]);
    let (j, s) = Journal::open(fd.try_clone().unwrap()).unwrap();
    assert_eq!(s.inodes.len(), 2);
    j.append(&Record::Dir { fh: 20, ino: 2 });
    assert!(replay(&file_bytes(&fd))
        .unwrap()
        .state
        .dirs
        .contains_key(&20));
}

/// `bytes` with the record at `i` (of [`records`]) replaced by `bad`'s bytes.
fn with_record(i: usize, bad: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut frames: Vec<Vec<u8>> = records().iter().map(frame).collect();
    if let Some(f) = frames.get_mut(i) {
        bad(f);
    }
    let mut out = header_bytes(HEADER_LEN as u64, 0).to_vec();
    out.extend(frames.concat());
    out
}

/// A frame of `body` with the right length and checksum.
fn framed(body: &[u8]) -> Vec<u8> {
    let mut f = (body.len() as u32).to_le_bytes().to_vec();
    f.extend_from_slice(&(xxhash_rust::xxh3::xxh3_64(body) as u32).to_le_bytes());
    f.extend_from_slice(body);
    f
}

#[test]
fn a_damaged_record_anywhere_fails_the_replay_and_a_takeover_touches_nothing() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("a flipped byte", with_record(4, |f| f[12] ^= 1)),
        ("a wrong checksum", with_record(2, |f| f[4] ^= 0x80)),
        (
            "an unknown kind",
            with_record(3, |f| *f = framed(&[b'Z', 1, 2, 3])),
        ),
        (
            "a length no record has",
            with_record(5, |f| f[..4].copy_from_slice(&u32::MAX.to_le_bytes())),
        ),
        (
            "a zero length",
            with_record(5, |f| f[..4].copy_from_slice(&[0; 4])),
        ),
        (
            "fields past its length",
            with_record(7, |f| {
                let mut body = f[FRAME_HEAD..].to_vec();
                body.push(0);
                *f = framed(&body);
            }),
        ),
        (
            "an inode number handed out twice",
            with_record(2, |f| {
                *f = frame(&Record::Inode {
                    ino: 2,
                    dir: false,
                    path: "d/g".into(),
                })
            }),
        ),
        (
            "an open of an inode never named",
            with_record(4, |f| {
                *f = frame(&Record::File {
                    fh: 7,
                    ino: 99,
                    meta: meta("e1"),
                })
            }),
        ),
        (
            "a directory handle on a file",
            with_record(7, |f| *f = frame(&Record::Dir { fh: 8, ino: 3 })),
        ),
        (
            "a close of a handle not open",
            with_record(9, |f| *f = frame(&Record::Closed { fh: 10 })),
        ),
        (
            "a snapshot that ends without beginning",
            with_record(9, |f| *f = frame(&Record::SnapshotEnd)),
        ),
    ];
    for (what, bytes) in cases {
        let e = replay(&bytes).expect_err(what);
        assert!(
            matches!(
                e,
                ReplayError::Record { .. } | ReplayError::UnopenedSnapshot { .. }
            ),
            "{what}: {e}"
        );
        let fd = memfd(&bytes);
        assert!(Journal::open(fd.try_clone().unwrap()).is_err(), "{what}");
        assert_eq!(file_bytes(&fd), bytes, "{what}: the file is left as it was");
    }
    // A damaged header.
    let mut h = with_record(99, |_| {});
    h[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(matches!(replay(&h), Err(ReplayError::Header(_))));
}

#[test]
fn many_opens_and_closes_keep_the_journal_bounded() {
    let j = written(&records()[..4]);
    let mut largest = 0;
    for i in 0..200_000u64 {
        let fh = 100 + i;
        j.append(&Record::File {
            fh,
            ino: 3,
            meta: meta("e1"),
        });
        j.append(&Record::Passed {
            fh,
            ino: 3,
            backed: false,
        });
        j.append(&Record::Closed { fh });
        largest = largest.max(j.bytes().unwrap().len());
    }
    // 200,000 opens are about 25 MB of records; the live state is a few hundred
    // bytes, so the journal stays within its slack.
    assert!(largest < 2 * SLACK, "{largest} bytes at most");
    let s = replay(&j.bytes().unwrap()).unwrap().state;
    assert_eq!(s.inodes.len(), 2);
    assert!(s.files.is_empty() && s.passed.is_empty());
    assert_eq!(s.page_versions.len(), 1);
}

#[test]
fn live_inodes_are_all_kept_through_compactions() {
    let j = written(&records()[..1]);
    for ino in 2..50_002u64 {
        j.append(&Record::Inode {
            ino,
            dir: false,
            path: format!("dir/file-{ino}"),
        });
        j.append(&Record::File {
            fh: ino,
            ino,
            meta: meta("e"),
        });
        if ino % 2 == 0 {
            j.append(&Record::Closed { fh: ino });
        }
    }
    let s = replay(&j.bytes().unwrap()).unwrap().state;
    assert_eq!(s.inodes.len(), 50_000);
    assert_eq!(s.files.len(), 25_000);
    assert_eq!(s.inodes.last().unwrap().0, 50_001);
}

#[test]
fn a_kill_at_any_step_of_a_compaction_leaves_the_state() {
    let rs = records();
    let j = written(&rs);
    let log = j.bytes().unwrap();
    let want = replay(&log).unwrap().state;
    let mut snap = frame(&Record::SnapshotBegin);
    for r in want.records() {
        snap.extend_from_slice(&frame(&r));
    }
    snap.extend_from_slice(&frame(&Record::SnapshotEnd));
    let mut appended = log.clone();
    appended.extend_from_slice(&snap);
    // Killed while writing the snapshot (any byte of it), or after it but before
    // the header pointed at it.
    for cut in log.len()..=appended.len() {
        let r = replay(&appended[..cut]).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert_eq!(r.state, want, "cut at {cut}");
    }
    // The header at the snapshot; a copy at the front being written, then the
    // header at the copy with its stop, before the file is cut.
    let mut pointed = appended.clone();
    pointed[..HEADER_LEN].copy_from_slice(&header_bytes(log.len() as u64, 0));
    assert_eq!(replay(&pointed).unwrap().state, want);
    let mut copying = pointed.clone();
    copying[HEADER_LEN..HEADER_LEN + 10].copy_from_slice(&snap[..10]);
    assert_eq!(replay(&copying).unwrap().state, want);
    let mut stopped = pointed.clone();
    stopped[HEADER_LEN..HEADER_LEN + snap.len()].copy_from_slice(&snap);
    stopped[..HEADER_LEN].copy_from_slice(&header_bytes(
        HEADER_LEN as u64,
        (HEADER_LEN + snap.len()) as u64,
    ));
    assert_eq!(replay(&stopped).unwrap().state, want);
    // A successor takes each of them over.
    for bytes in [pointed, copying, stopped] {
        let fd = memfd(&bytes);
        let (_, s) = Journal::open(fd.try_clone().unwrap()).unwrap();
        assert_eq!(s, want);
        assert_eq!(replay(&file_bytes(&fd)).unwrap().state, want);
    }
}

#[test]
fn a_journal_from_before_headers_is_taken_over_and_given_one() {
    let mut old = Vec::new();
    for r in records() {
        old.extend_from_slice(&frame(&r));
    }
    let torn = frame(&Record::Closed { fh: 7 });
    old.extend_from_slice(&torn[..torn.len() - 2]);
    let r = replay(&old).unwrap();
    assert!(r.headerless);
    check(&r.state);
    let fd = memfd(&old);
    let (j, s) = Journal::open(fd.try_clone().unwrap()).unwrap();
    check(&s);
    let now = file_bytes(&fd);
    assert!(now.starts_with(&replay::MAGIC));
    assert_eq!(replay(&now).unwrap().state, s);
    j.append(&Record::Closed { fh: 8 });
    assert!(replay(&file_bytes(&fd)).unwrap().state.dirs.is_empty());
    // An empty one (a new mount's, from a keeper of before) too.
    let (j, s) = Journal::open(memfd(&[])).unwrap();
    assert!(s.is_empty());
    j.append(&Record::Agreed(AGREED));
    assert_eq!(
        replay(&j.bytes().unwrap()).unwrap().state.agreed,
        Some(AGREED)
    );
}

#[test]
fn a_journal_grown_by_inodes_alone_is_not_compacted() {
    // A walk's listings name 20,000 new inodes, 100 a page: nothing in them
    // can die, so no compaction (a replay of everything) is worth its cost.
    let j = Journal::create().unwrap();
    let mut written = HEADER_LEN;
    for page in 0..200u64 {
        let rs: Vec<Record> = (0..100)
            .map(|i| Record::Inode {
                ino: 2 + page * 100 + i,
                dir: page == 0 && i == 0,
                path: format!("dir-{page:04}/file-{i:05}.dat"),
            })
            .collect();
        written += rs.iter().map(|r| frame(r).len()).sum::<usize>();
        j.append_all(&rs);
    }
    let bytes = j.bytes().unwrap();
    assert_eq!(bytes.len(), written, "records appended, never rewritten");
    assert_eq!(replay(&bytes).unwrap().state.inodes.len(), 20_000);
    // Handles opened and closed past that still are compacted away.
    for fh in 1..20_000u64 {
        j.append(&Record::Dir { fh, ino: 2 });
        j.append(&Record::Closed { fh });
    }
    let after = j.bytes().unwrap();
    assert!(after.len() < 2 * written + SLACK, "{} bytes", after.len());
    let s = replay(&after).unwrap().state;
    assert_eq!(s.inodes.len(), 20_000);
    assert!(s.dirs.is_empty());
}
