//! Telling a supervisor (systemd `Type=notify`) that a service is ready.

/// Sends `READY=1` to `$NOTIFY_SOCKET` when there is one; a no-op otherwise.
pub fn ready() {
    send("READY=1");
}

/// Sends `state` (lines like `MAINPID=N`, `RELOADING=1`) to `$NOTIFY_SOCKET` when
/// there is one; a no-op otherwise.
pub fn send(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let sock = match std::os::unix::net::UnixDatagram::unbound() {
        Ok(s) => s,
        Err(e) => return tracing::warn!("cannot notify systemd: {e}"),
    };
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
    let sent = if let Some(abstract_name) = bytes.strip_prefix(b"@") {
        // An abstract socket name.
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(abstract_name)
            .and_then(|a| sock.send_to_addr(state.as_bytes(), &a))
    } else {
        sock.send_to(state.as_bytes(), &path)
    };
    if let Err(e) = sent {
        tracing::warn!("cannot notify systemd at {path:?}: {e}");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sends_ready_to_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        // SAFETY: this test is the only user of NOTIFY_SOCKET in the process.
        unsafe { std::env::set_var("NOTIFY_SOCKET", &path) };
        super::ready();
        unsafe { std::env::remove_var("NOTIFY_SOCKET") };
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
    }
}
