//! The mount's journal as a live mount keeps it: a damaged one fails the
//! takeover loudly (the keeper answers EIO, nothing is served from part of the
//! state), and many opens and closes leave it bounded, its open handles kept.

use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::*;

/// A mount of the origin alone with its control socket at a known path.
fn mount(o: &Origin, extra: &str) -> (Mount, tempfile::TempDir, PathBuf) {
    let sockdir = tempfile::tempdir().unwrap();
    let socket = sockdir.path().join("control.sock");
    let m = Mount::start_logged(
        &mount_toml(o, &[], extra),
        BUCKET,
        &["--control-socket", socket.to_str().unwrap()],
    );
    (m, sockdir, socket)
}

/// The mount's journal, as its keeper holds it.
fn journal(socket: &Path) -> std::fs::File {
    let (_dev, journal) = shoal_mount::keeper::ask_fds(socket).expect("the mount's descriptors");
    std::fs::File::from(journal)
}

/// Its bytes, read from the start (the offset is shared with the keeper's).
fn bytes(f: &std::fs::File) -> Vec<u8> {
    let mut buf = vec![0u8; f.metadata().unwrap().len() as usize];
    f.read_exact_at(&mut buf, 0).unwrap();
    buf
}

fn errno<T>(r: &std::io::Result<T>) -> Option<i32> {
    r.as_ref().err().and_then(|e| e.raw_os_error())
}

fn status(socket: &Path) -> serde_json::Value {
    serde_json::from_str(&shoal_mount::keeper::ask(socket, "status").unwrap()).unwrap()
}

/// Where each record of `buf` (a journal with a header) starts, with its body.
fn records(buf: &[u8]) -> Vec<(usize, &[u8])> {
    let mut at = u64::from_le_bytes(buf[8..16].try_into().unwrap()) as usize;
    let mut out = Vec::new();
    while at + 8 <= buf.len() {
        let len = u32::from_le_bytes(buf[at..at + 4].try_into().unwrap()) as usize;
        let Some(body) = buf.get(at + 8..at + 8 + len) else {
            break;
        };
        out.push((at, body));
        at += 8 + len;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_journal_fails_the_takeover_and_the_mount_answers_eio() {
    let o = origin().await;
    for i in 0..5 {
        o.put(BUCKET, &format!("j/f{i}"), data(100_000, 30 + i));
    }
    let (m, _sockdir, socket) = mount(&o, "");
    let server = status(&socket)["server"].as_u64().unwrap() as u32;
    let mnt = m.mnt.clone();
    let open = tokio::task::spawn_blocking(move || {
        for i in 0..4 {
            assert_eq!(
                std::fs::read(mnt.join(format!("j/f{i}"))).unwrap(),
                data(100_000, 30 + i)
            );
        }
        // Open, none of it read yet: its reads are the server's to answer.
        std::fs::File::open(mnt.join("j/f4")).unwrap()
    })
    .await
    .unwrap();

    // One byte of f1's inode record changed, in the middle of the journal: its
    // checksum no longer matches, and records follow it.
    let j = journal(&socket);
    let buf = bytes(&j);
    let recs = records(&buf);
    let (i, (at, body)) = recs
        .iter()
        .enumerate()
        .find(|(_, (_, b))| b[0] == b'I' && b.ends_with(b"j/f1"))
        .expect("f1's inode record");
    assert!(i + 2 < recs.len(), "records follow it");
    let flip = at + 8 + body.len() - 1;
    j.write_all_at(&[buf[flip] ^ 0x20], flip as u64).unwrap();

    // The server dies; no successor can take the damaged state over.
    signal(server, "-KILL");
    let mnt = m.mnt.clone();
    let t0 = Instant::now();
    let (name, handle, listing) = tokio::task::spawn_blocking(move || {
        let name = std::fs::read(mnt.join("j/f0"));
        let mut buf = vec![0u8; 4096];
        let handle = open.read_at(&mut buf, 0);
        let listing = std::fs::read_dir(mnt.join("j")).map(|d| d.count());
        (name, handle, listing)
    })
    .await
    .unwrap();
    let name = name.map(|b| b.len());
    assert_eq!(
        errno(&name),
        Some(libc::EIO),
        "a read by name: {name:?} bytes"
    );
    assert_eq!(
        errno(&handle),
        Some(libc::EIO),
        "a read of an open file: {handle:?}"
    );
    assert_eq!(errno(&listing), Some(libc::EIO), "a listing: {listing:?}");
    assert!(t0.elapsed() < Duration::from_secs(30));
    assert!(m.is_mounted(), "still mounted: EIO, never ENOTCONN");
    let log = m.log();
    assert!(
        log.contains("the mount's journal cannot be taken over")
            && log.contains("checksum does not match"),
        "the log says why: {log}"
    );
    // The damaged journal is left as it was, for a look. (Its keeper, trying
    // servers again, answers no control command meanwhile.)
    assert_eq!(bytes(&j)[flip], buf[flip] ^ 0x20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_opens_and_closes_keep_the_journal_bounded_and_its_open_files() {
    let o = origin().await;
    let body = data(50_000, 77);
    o.put(BUCKET, "b/kept", body.clone());
    o.put(BUCKET, "b/churn", data(1000, 78));
    let (m, _sockdir, socket) = mount(&o, "");
    let mnt = m.mnt.clone();
    let (kept, opens) = tokio::task::spawn_blocking(move || {
        let kept = std::fs::File::open(mnt.join("b/kept")).unwrap();
        let churn = mnt.join("b/churn");
        let mut opens = 0;
        for _ in 0..4000 {
            let mut f = std::fs::File::open(&churn).unwrap();
            let mut b = [0u8; 1];
            f.read_exact(&mut b).unwrap();
            opens += 1;
        }
        (kept, opens)
    })
    .await
    .unwrap();
    let size = bytes(&journal(&socket)).len();
    println!("{opens} opens and closes: a journal of {size} bytes");
    // Each open and close is about 130 bytes of records: 4,000 would be 500 kB.
    assert!(size < 150_000, "{size} bytes after {opens} opens");

    // The handle open throughout is in it: a successor reads it.
    let server = status(&socket)["server"].as_u64().unwrap() as u32;
    signal(server, "-KILL");
    let got = tokio::task::spawn_blocking(move || {
        let mut buf = vec![0u8; body.len()];
        kept.read_exact_at(&mut buf, 0).map(|()| buf == body[..])
    })
    .await
    .unwrap();
    assert!(
        got.unwrap(),
        "the open file reads its bytes after the takeover"
    );
    drop(m);
}

/// A keeper that adopts a live connection (as the CSI driver starts one after
/// the last keeper died) whose journal is damaged: the connection may have
/// readers, so it is treated as a server crash (servers tried again, EIO
/// meanwhile), never unmounted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keeper_adopting_a_damaged_journal_answers_eio_and_keeps_the_mount() {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let o = origin().await;
    o.put(BUCKET, "a/f0", data(100_000, 50));
    o.put(BUCKET, "a/f1", data(100_000, 51));
    let (mut m, _sockdir, socket) = mount(&o, "");
    let mnt = m.mnt.clone();
    tokio::task::spawn_blocking(move || {
        for i in 0..2 {
            assert_eq!(
                std::fs::read(mnt.join(format!("a/f{i}"))).unwrap(),
                data(100_000, 50 + i)
            );
        }
    })
    .await
    .unwrap();
    // Copies of the connection and the journal, as the driver keeps them.
    let (dev, journal) = shoal_mount::keeper::ask_fds(&socket).expect("descriptors");
    let j = std::fs::File::from(journal.try_clone().unwrap());
    let buf = bytes(&j);
    let (at, body) = *records(&buf)
        .iter()
        .find(|(_, b)| b[0] == b'I' && b.ends_with(b"a/f0"))
        .expect("f0's inode record");
    let flip = at + 8 + body.len() - 1;
    j.write_all_at(&[buf[flip] ^ 0x20], flip as u64).unwrap();

    // The keeper dies (its server with it); the connection lives in our copy.
    let mut keeper = m.child.take().unwrap();
    keeper.kill().unwrap();
    keeper.wait().unwrap();
    assert!(m.is_mounted());

    let log = m.dir.path().join("adopt.log");
    let (d, jf) = (dev.as_raw_fd(), journal.as_raw_fd());
    let mut cmd = std::process::Command::new(bin("shoal-mount"));
    cmd.arg("--config")
        .arg(m.dir.path().join("mount.toml"))
        .arg("--foreground")
        .args(["--control-socket", socket.to_str().unwrap()])
        .arg(BUCKET)
        .arg(&m.mnt)
        .env(shoal_mount::keeper::ADOPT_ENV, format!("{d},{jf}"))
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    // SAFETY: only fcntl between fork and exec: the copies are inherited.
    unsafe {
        cmd.pre_exec(move || {
            for fd in [d, jf] {
                libc::fcntl(fd, libc::F_SETFD, 0);
            }
            Ok(())
        });
    }
    m.child = Some(cmd.spawn().unwrap());

    let mnt = m.mnt.clone();
    let t0 = Instant::now();
    let name =
        tokio::task::spawn_blocking(move || std::fs::read(mnt.join("a/f1")).map(|b| b.len()))
            .await
            .unwrap();
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        errno(&name),
        Some(libc::EIO),
        "a read: {name:?}; {}",
        text()
    );
    assert!(t0.elapsed() < Duration::from_secs(30));
    assert!(m.is_mounted(), "still mounted: {}", text());
    assert!(
        m.child.as_mut().unwrap().try_wait().unwrap().is_none(),
        "the adopting keeper still runs: {}",
        text()
    );
    assert!(
        text().contains("the mount's journal cannot be taken over"),
        "the log says why: {}",
        text()
    );
    drop(dev);
}
