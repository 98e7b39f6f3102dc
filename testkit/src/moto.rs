//! moto's S3 server (Python, `moto[server]`): an S3 implementation independent of
//! shoal's own test origin, to hold both to S3's behaviour.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `moto_server` on loopback; killed when dropped.
pub struct Moto {
    child: Child,
    /// `http://127.0.0.1:PORT`
    pub endpoint: String,
}

impl Moto {
    /// Starts moto on a free port and waits until it answers.
    pub fn start() -> Moto {
        let addr = super::free_addr();
        let (host, port) = addr.rsplit_once(':').expect("host:port");
        let child = Command::new("python3")
            .args(["-m", "moto.server", "-H", host, "-p", port])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 with moto[server] (scripts/test.sh installs it)");
        let mut m = Moto {
            child,
            endpoint: format!("http://{addr}"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(&addr).is_err() {
            if let Ok(Some(status)) = m.child.try_wait() {
                panic!("moto_server exited ({status}): is moto[server] installed?");
            }
            assert!(Instant::now() < deadline, "moto_server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        m
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
