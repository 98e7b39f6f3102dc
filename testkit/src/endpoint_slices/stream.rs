//! A watch's response body: its events as they come, bookmarks, and its end.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::BodyExt;
use hyper::body::Frame;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::object::bookmark;
use super::{event_line, Store};

/// Every answer's body: a whole one, or a watch's events as they come.
pub(super) type Body = UnsyncBoxBody<Bytes, Infallible>;

/// How often a watch that allows bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_millis(500);

/// The response to a watch, fed by its own task from `events`.
pub(super) fn respond(
    store: &Arc<Mutex<Store>>,
    events: mpsc::UnboundedReceiver<Bytes>,
    bookmarks: bool,
    timeout: Option<u64>,
) -> Response<Body> {
    let (out, body) = mpsc::channel::<Bytes>(64);
    let deadline = timeout.map(|t| Instant::now() + Duration::from_secs(t));
    tokio::spawn(forward(store.clone(), events, out, bookmarks, deadline));
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(Lines(body).boxed_unsync())
        .unwrap()
}

/// A watch's task: sends its events to the response, a bookmark every
/// [`BOOKMARK_EVERY`] if asked, and ends when the store drops the watch, the
/// client goes away, or `deadline` comes.
async fn forward(
    store: Arc<Mutex<Store>>,
    mut events: mpsc::UnboundedReceiver<Bytes>,
    out: mpsc::Sender<Bytes>,
    bookmarks: bool,
    deadline: Option<Instant>,
) {
    let mut ticks = tokio::time::interval_at(Instant::now() + BOOKMARK_EVERY, BOOKMARK_EVERY);
    let end = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(end);
    loop {
        tokio::select! {
            biased;
            line = events.recv() => {
                let Some(line) = line else { return };
                if out.send(line).await.is_err() {
                    return;
                }
            }
            _ = ticks.tick(), if bookmarks => {
                // Under the store's lock, so the bookmark's version follows
                // every event it covers, and none after a closed watch.
                let (held, version, open) = {
                    let s = store.lock().unwrap();
                    let mut held = Vec::new();
                    let open = loop {
                        match events.try_recv() {
                            Ok(line) => held.push(line),
                            Err(mpsc::error::TryRecvError::Empty) => break true,
                            Err(mpsc::error::TryRecvError::Disconnected) => break false,
                        }
                    };
                    (held, s.version, open)
                };
                for line in held {
                    if out.send(line).await.is_err() {
                        return;
                    }
                }
                if !open {
                    return;
                }
                if out.send(event_line("BOOKMARK", bookmark(version))).await.is_err() {
                    return;
                }
            }
            _ = &mut end => return,
            _ = out.closed() => return,
        }
    }
}

/// A streamed response body: the lines a watch's task sends, each a chunk;
/// it ends when the task drops its sender.
struct Lines(mpsc::Receiver<Bytes>);

impl hyper::body::Body for Lines {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|line| line.map(|l| Ok(Frame::data(l))))
    }
}
