//! The successor's side: take the old node's sockets, check what it can, ask it
//! to let go, and say when it serves.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::link::{Control, Link};
use super::{format, HandoverError, Message};

/// How long the old node has to answer the hello.
const OFFER_LIMIT: Duration = Duration::from_secs(30);
/// How long the old node has to let go: its drain (node.shutdown_timeout, the
/// successor's may differ) and its last disk writes. It ending sooner is seen at
/// once: the link closes.
const RELEASE_LIMIT: Duration = Duration::from_secs(15 * 60);

/// What the successor took over.
pub struct Taken {
    pub listener: std::net::TcpListener,
    pub control: Option<Control>,
    /// The old node's pid.
    pub from: u32,
    link: Arc<Link>,
}

impl Taken {
    /// Tells the old node this one serves: it exits.
    pub fn serving(&self) {
        if let Err(e) = self.link.send(&Message::Serving.to_string(), &[]) {
            tracing::warn!(
                "cannot tell the old node (pid {}) this one serves: {e}",
                self.from
            );
        }
    }
}

async fn recv(
    link: &Arc<Link>,
    limit: Duration,
) -> Result<(String, Vec<std::os::fd::OwnedFd>), HandoverError> {
    let l = link.clone();
    tokio::task::spawn_blocking(move || l.recv_within(limit))
        .await
        .map_err(|e| HandoverError::Io(std::io::Error::other(e)))??
        .ok_or(HandoverError::Gone)
}

/// Takes over from the node at the other end of `link`. `data_dir` is the disk
/// tier this process will open; `prepared` checks the rest (credentials) before
/// the old node lets go. A refusal is told to the old node, which goes on.
pub async fn take(
    link: Link,
    data_dir: Option<&Path>,
    control_path: Option<&Path>,
    prepared: impl Future<Output = Result<(), String>>,
) -> Result<Taken, HandoverError> {
    let link = Arc::new(link);
    let hello = Message::Hello {
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").into(),
        format: format::disk_format(),
    };
    link.send(&hello.to_string(), &[])?;
    let (offer, mut fds) = recv(&link, OFFER_LIMIT).await?;
    let Message::Offer {
        pid: from,
        version,
        format: theirs,
        control: has_control,
    } = Message::parse(&offer)?
    else {
        return Err(HandoverError::Protocol(offer));
    };
    if fds.len() != 1 + has_control as usize {
        return Err(HandoverError::Protocol(format!(
            "{offer} with {} sockets",
            fds.len()
        )));
    }
    tracing::info!("taking over from shoal-node {version} (pid {from})");
    let checked = match format::check_node(theirs) {
        Err(e) => Err(e.to_string()),
        Ok(()) => match data_dir.map(format::check_files) {
            Some(Err(e)) => Err(e.to_string()),
            _ => prepared.await,
        },
    };
    if let Err(why) = checked {
        let _ = link.send(&Message::Refuse(why.clone()).to_string(), &[]);
        return Err(HandoverError::Refused(why));
    }
    let control = if has_control { fds.pop() } else { None };
    let listener = std::net::TcpListener::from(fds.pop().expect("counted above"));
    listener.set_nonblocking(true)?;
    link.send(&Message::Take.to_string(), &[])?;
    let (said, _) = recv(&link, RELEASE_LIMIT).await?;
    if Message::parse(&said)? != Message::Released {
        return Err(HandoverError::Protocol(said));
    }
    let control = match (control, control_path) {
        (Some(fd), Some(path)) => Some(Control::from_fd(path, fd)),
        // The old node had none (or this one names none): listen afresh.
        (_, path) => super::listen_control(path),
    };
    Ok(Taken {
        listener,
        control,
        from,
        link,
    })
}
