//! [`Pipes`]: the pipes reads are spliced through, kept for the next read (one
//! per read in flight, each empty while idle).

use std::sync::Mutex;

use shoal::store::pipe::{Pipe, PIPE_BYTES};

/// The most idle pipes kept by default: about the reads the kernel keeps in
/// flight.
pub const IDLE: usize = 96;

pub struct Pipes {
    idle: Mutex<Vec<Pipe>>,
    /// The most kept idle: each holds its ring of slots in the kernel.
    keep: usize,
}

impl Pipes {
    /// Pipes for reads, `keep` of them kept while idle.
    pub fn new(keep: usize) -> Pipes {
        Pipes {
            idle: Mutex::new(Vec::new()),
            keep,
        }
    }

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
        if idle.len() < self.keep {
            idle.push(pipe);
        }
    }
}
