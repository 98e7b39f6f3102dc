//! The body-stall deadline, for any body: a stream that fails once no bytes have
//! come for a while, so a reader never waits on a body that stopped.

use std::time::Duration;

use futures_util::StreamExt;

use super::{ByteStream, Deadline, StoreError};

/// `body`, failing with a stall [`StoreError::Timeout`] when no chunk arrives for
/// `stall`. Ends after the first error.
pub fn stall_guard(body: ByteStream, stall: Duration, endpoint: String) -> ByteStream {
    paced_guard(body, stall, stall, endpoint)
}

/// `body`, failing with a first-byte [`StoreError::Timeout`] when its first
/// chunk does not arrive within `first`, and with a stall one when a later
/// chunk does not arrive within `stall` of the one before: a body whose
/// headers came before its bytes were ready (an answer acknowledged at once)
/// judged as a read's first byte and stalls are. Ends after the first error.
pub fn paced_guard(
    body: ByteStream,
    first: Duration,
    stall: Duration,
    endpoint: String,
) -> ByteStream {
    Box::pin(futures_util::stream::unfold(
        (Some(body), true),
        move |(state, at_first)| {
            let endpoint = endpoint.clone();
            async move {
                let mut s = state?;
                let (wait, deadline) = match at_first {
                    true => (first, Deadline::FirstByte),
                    false => (stall, Deadline::Stall),
                };
                match tokio::time::timeout(wait, s.next()).await {
                    Err(_) => Some((
                        Err(StoreError::Timeout {
                            endpoint,
                            deadline,
                            after: wait,
                        }),
                        (None, false),
                    )),
                    Ok(None) => None,
                    Ok(Some(Ok(b))) => Some((Ok(b), (Some(s), false))),
                    Ok(Some(Err(e))) => Some((Err(e), (None, false))),
                }
            }
        },
    ))
}
