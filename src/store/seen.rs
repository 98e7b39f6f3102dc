//! `Cache-Status` headers of the answers a caller's requests got, seen without a
//! parameter through every layer between: a gateway puts the entries of the node
//! it forwarded to after its own.

use std::future::Future;
use std::sync::{Arc, Mutex};

tokio::task_local! {
    static SEEN: Arc<Mutex<Vec<String>>>;
}

/// Runs `f`, and returns with its output the `Cache-Status` values its S3 answers
/// carried (requests `f` hands to other tasks are not seen).
pub async fn cache_statuses<F: Future>(f: F) -> (F::Output, Vec<String>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = SEEN.scope(seen.clone(), f).await;
    let v = std::mem::take(&mut *seen.lock().unwrap());
    (out, v)
}

/// Notes an answer's `Cache-Status`, if someone is watching.
pub(crate) fn saw(h: &http::HeaderMap) {
    let Some(v) = h.get("cache-status").and_then(|v| v.to_str().ok()) else {
        return;
    };
    let _ = SEEN.try_with(|s| {
        let mut s = s.lock().unwrap();
        if s.len() < 8 {
            s.push(v.to_owned());
        }
    });
}

/// Who is watching the current task, to carry into a task it starts for the
/// same work (a block's fetch, run apart so that every asker shares it).
pub fn watcher() -> Option<Arc<Mutex<Vec<String>>>> {
    SEEN.try_with(Arc::clone).ok()
}

/// Runs `f` watched by `w` (from [`watcher`]), if anyone was watching.
pub async fn watched<F: Future>(w: Option<Arc<Mutex<Vec<String>>>>, f: F) -> F::Output {
    match w {
        Some(w) => SEEN.scope(w, f).await,
        None => f.await,
    }
}
