//! [`Pipes`]: the pipes reads are spliced through, kept for the next read (one
//! per read in flight, each empty while idle).

use std::sync::Mutex;

use shoal::store::pipe::{Pipe, PIPE_BYTES};

/// The most idle pipes kept: about the reads the kernel keeps in flight.
const IDLE: usize = 96;

#[derive(Default)]
pub struct Pipes {
    idle: Mutex<Vec<Pipe>>,
}

impl Pipes {
    /// An empty pipe that holds a whole reply, or none if the system will not
    /// make one (then the read goes the copying way).
    pub fn take(&self) -> Option<Pipe> {
        if let Some(p) = self.idle.lock().unwrap().pop() {
            return Some(p);
        }
        match Pipe::new() {
            Ok(p) if p.capacity() >= PIPE_BYTES => Some(p),
            Ok(_) => None,
            Err(e) => {
                tracing::debug!("no pipe for a spliced read: {e}");
                None
            }
        }
    }

    /// Keeps `pipe` for another read if it is empty.
    pub fn give(&self, mut pipe: Pipe) {
        if pipe.held() > 0 && pipe.clear().is_err() {
            return;
        }
        let mut idle = self.idle.lock().unwrap();
        if idle.len() < IDLE {
            idle.push(pipe);
        }
    }
}
