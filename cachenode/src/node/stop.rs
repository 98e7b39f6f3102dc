//! What a node does as it stops, once it answers no more requests: the blocks
//! it holds only in RAM go to its disk tier, and the object versions it knows
//! to the log beside them, so that the node started next on the same disk
//! serves (and answers runner-up asks for) everything this one held.

use std::time::Duration;

use shoal::blocks::Kept;

use super::Node;

impl Node {
    /// Writes what is worth keeping to disk, for at most `within` (the
    /// versions are written whatever is left of it). Called after the last
    /// request is answered: on SIGTERM, and before a handover to a new process.
    pub async fn keep_on_stop(&self, within: Duration) -> Kept {
        let kept = if self.tiers.has_disk() && !within.is_zero() {
            shoal::blocks::keep_on_disk(&self.tiers, within).await
        } else {
            Kept::default()
        };
        match self.versions.save() {
            Ok(n) if self.tiers.has_disk() => tracing::info!(
                "stopping: {} blocks ({} bytes) held only in RAM written to disk in {:?}{}, {n} object versions kept",
                kept.written,
                kept.bytes,
                kept.took,
                if kept.left > 0 {
                    format!(", {} left unwritten at node.stop_flush_timeout", kept.left)
                } else {
                    String::new()
                }
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!("stopping: cannot keep the object versions: {e}"),
        }
        kept
    }
}
