//! `[node] access_log`: one JSON line per S3 request, refusals included, written
//! by a thread of its own so no request waits on the disk. SIGUSR1 reopens the
//! file (after logrotate moved it): the reopen is a message in the same queue as
//! the lines, so every line before it goes to the old file and every line after
//! to the new one, and none is lost between.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use serde::Serialize;

/// Lines queued for the writer at most; past them lines are dropped and counted.
const QUEUE: usize = 1 << 16;

/// One request, as its line says it.
#[derive(Serialize, Debug, Default)]
pub struct Line {
    pub time: String,
    /// The access key the request was signed with (`null` when unsigned).
    pub access_key: Option<String>,
    pub client: String,
    pub method: String,
    pub bucket: String,
    pub key: String,
    pub range: Option<String>,
    pub status: u16,
    /// Body bytes sent.
    pub bytes: u64,
    /// What the cache did: hit, miss, stale, bypass; `null` when no object was
    /// served from the read path.
    pub cache: Option<&'static str>,
    pub duration_ms: f64,
    pub origin_requests: u32,
    /// The refusal's S3 code, when the node refused the request before it ran.
    pub error: Option<&'static str>,
    /// Blocks this request missed that were asked of their runner-up node first
    /// (`only-if-cached`), by result; `null` when none were.
    pub peer_fill: Option<super::trace::PeerFills>,
}

enum Msg {
    Line(String),
    Reopen,
}

pub struct AccessLog {
    tx: mpsc::SyncSender<Msg>,
    dropped: prometheus_client::metrics::counter::Counter,
}

fn open(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

impl AccessLog {
    /// Opens `path` (an error now rather than lines lost later) and starts the writer.
    pub fn start(
        path: PathBuf,
        dropped: prometheus_client::metrics::counter::Counter,
    ) -> Result<AccessLog, String> {
        let file = open(&path).map_err(|e| format!("node.access_log {}: {e}", path.display()))?;
        let (tx, rx) = mpsc::sync_channel::<Msg>(QUEUE);
        std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || write_lines(path, file, rx))
            .map_err(|e| format!("access log writer: {e}"))?;
        Ok(AccessLog { tx, dropped })
    }

    pub fn write(&self, line: &Line) {
        let Ok(text) = serde_json::to_string(line) else {
            return;
        };
        if self.tx.try_send(Msg::Line(text)).is_err() {
            self.dropped.inc();
        }
    }

    /// Reopens the file by name, after the lines already queued.
    pub fn reopen(&self) {
        // The reopen must not be dropped: wait for room.
        let _ = self.tx.send(Msg::Reopen);
    }
}

fn write_lines(path: PathBuf, file: std::fs::File, rx: mpsc::Receiver<Msg>) {
    let mut out = std::io::BufWriter::with_capacity(64 << 10, file);
    let mut failing = false;
    loop {
        // Lines are flushed once the queue is empty, at most 200 ms late.
        let msg = match rx.try_recv() {
            Ok(m) => m,
            Err(mpsc::TryRecvError::Empty) => {
                let _ = out.flush();
                match rx.recv_timeout(Duration::from_millis(200)) {
                    Ok(m) => m,
                    Err(mpsc::RecvTimeoutError::Timeout) => continue,
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
            Err(mpsc::TryRecvError::Disconnected) => break,
        };
        match msg {
            Msg::Line(text) => {
                let r = out
                    .write_all(text.as_bytes())
                    .and_then(|()| out.write_all(b"\n"));
                if let Err(e) = r {
                    if !failing {
                        tracing::error!("access log {}: {e}", path.display());
                    }
                    failing = true;
                }
            }
            Msg::Reopen => {
                let _ = out.flush();
                match open(&path) {
                    Ok(f) => {
                        out = std::io::BufWriter::with_capacity(64 << 10, f);
                        failing = false;
                        tracing::info!("access log {} reopened", path.display());
                    }
                    Err(e) => tracing::error!(
                        "access log {}: cannot reopen ({e}); writing on to the old file",
                        path.display()
                    ),
                }
            }
        }
    }
    let _ = out.flush();
}
