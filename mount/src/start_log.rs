//! `--start-log FILE`: the log of a mount's start written to FILE besides
//! standard error: the keeper's lines until the mount is live, each server's
//! until it serves, and why a start failed. What starts a mount as a unit of
//! the host's systemd (a CSI driver in a container) cannot read the host's
//! journal; this file in the volume's directory it can, and it stays small: a
//! long-lived mount's log goes on in the journal alone.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

static FILE: Mutex<Option<std::fs::File>> = Mutex::new(None);

/// Opens the start log: afresh for a keeper (`fresh`), appended to by the
/// servers it starts.
pub fn open(path: &Path, fresh: bool) -> std::io::Result<()> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(!fresh)
        .write(true)
        .truncate(fresh)
        .open(path)?;
    *FILE.lock().unwrap() = Some(f);
    Ok(())
}

/// The start is over: no more lines go to the file.
pub fn done() {
    FILE.lock().unwrap().take();
}

/// Writes `line` to the start log alone (one printed to standard error besides).
pub fn note(line: &str) {
    if let Some(f) = FILE.lock().unwrap().as_mut() {
        let _ = writeln!(f, "{line}");
    }
}

/// Standard error, and the start log while the mount starts: the log's writer.
pub struct Tee;

impl Write for Tee {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = std::io::stderr().write(buf)?;
        if let Some(f) = FILE.lock().unwrap().as_mut() {
            let _ = f.write_all(&buf[..n]);
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_go_to_the_file_until_the_start_is_over() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("start.log");
        std::fs::write(&p, "an earlier start\n").unwrap();
        open(&p, true).unwrap();
        Tee.write_all(b"keeper: mounting\n").unwrap();
        note("shoal-mount: it failed");
        open(&p, false).unwrap();
        Tee.write_all(b"server: serving\n").unwrap();
        done();
        Tee.write_all(b"after the start\n").unwrap();
        note("nor this");
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "keeper: mounting\nshoal-mount: it failed\nserver: serving\n"
        );
    }
}
