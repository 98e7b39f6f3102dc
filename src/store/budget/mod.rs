//! What one process asks of the origin: at most so many requests and bytes a
//! second and so many requests at once (each off unless configured), shared by
//! [`Class`]es in priority order, and shrunk while the origin throttles.
//!
//! Every request to the origin takes a [`Permit`] from the process's [`Budget`]
//! before it is sent ([`Budget::acquire`]). Waiting requests are let go in class
//! order, the most important first and in arrival order within a class, so a
//! read a client waits on never queues behind read-ahead or a warm. Lower
//! classes also leave headroom (a share of the concurrency, some bytes in the
//! bucket) that only a read may use: a read arriving while a warm saturates the
//! budget starts at once instead of after the warm's next request.
//!
//! The origin's `503 SlowDown` (or 429, or a throttling code) is the origin
//! saying the process asks too much: the budget halves its concurrency and
//! sets its request rate just under what the origin answered, undoes that if
//! the origin then answers fewer (it throttles a share whatever it is asked),
//! and grows both back as answers succeed ([`aimd`]).
//!
//! Which class a request is comes from the task it runs in ([`within`]), so
//! the code between a node's HTTP API and its origin client carries no extra
//! argument.

mod aimd;
mod gate;
mod metrics;

use std::future::Future;

pub use gate::{Budget, Permit};
pub use metrics::BudgetMetrics;

/// What a request to the origin is for, most important first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// A client is waiting on it.
    #[default]
    Read,
    /// Read-ahead: a client will likely want it soon.
    ReadAhead,
    /// `shoal warm`, warming after a write, drains and fills: nobody waits.
    Background,
}

impl Class {
    pub const ALL: [Class; 3] = [Class::Read, Class::ReadAhead, Class::Background];

    /// Its name in metrics and in the `x-shoal-class` header.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Read => "read",
            Class::ReadAhead => "read-ahead",
            Class::Background => "background",
        }
    }

    pub fn parse(s: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.as_str() == s.trim())
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The limits, each off (`None`) unless configured.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Limits {
    pub requests_per_second: Option<f64>,
    pub bytes_per_second: Option<u64>,
    pub concurrency: Option<usize>,
}

tokio::task_local! {
    static CLASS: Class;
}

/// Runs `f` with its origin requests counted as `class`.
pub async fn within<F: Future>(class: Class, f: F) -> F::Output {
    CLASS.scope(class, f).await
}

/// Runs `f`, and the flights it starts, with their origin requests counted as
/// `class`.
pub fn within_sync<R>(class: Class, f: impl FnOnce() -> R) -> R {
    CLASS.sync_scope(class, f)
}

/// The class of the running task's origin requests: [`Class::Read`] unless
/// [`within`] says otherwise (a request nobody marked is one someone waits on).
pub fn current() -> Class {
    CLASS.try_with(|c| *c).unwrap_or(Class::Read)
}

#[cfg(test)]
mod tests;
