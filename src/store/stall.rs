//! The body-stall deadline, for any body: a stream that fails once no bytes have
//! come for a while, so a reader never waits on a body that stopped.

use std::time::Duration;

use futures_util::StreamExt;

use super::{ByteStream, Deadline, StoreError};

/// `body`, failing with a stall [`StoreError::Timeout`] when no chunk arrives for
/// `stall`. Ends after the first error.
pub fn stall_guard(body: ByteStream, stall: Duration, endpoint: String) -> ByteStream {
    Box::pin(futures_util::stream::unfold(Some(body), move |state| {
        let endpoint = endpoint.clone();
        async move {
            let mut s = state?;
            match tokio::time::timeout(stall, s.next()).await {
                Err(_) => Some((
                    Err(StoreError::Timeout {
                        endpoint,
                        deadline: Deadline::Stall,
                        after: stall,
                    }),
                    None,
                )),
                Ok(None) => None,
                Ok(Some(Ok(b))) => Some((Ok(b), Some(s))),
                Ok(Some(Err(e))) => Some((Err(e), None)),
            }
        }
    }))
}
