//! The node's own test harness: nodes in process, on the shared test kit (the real
//! origin, node processes, configs, clients, data, metrics).
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use shoal::config::Config;
use shoal::store::s3::S3Client;
use shoal_node::App;
use tokio::sync::oneshot;

pub use shoal_testkit::*;

/// A node serving in this process; stopped when dropped.
pub struct TestNode {
    pub addr: std::net::SocketAddr,
    pub app: Arc<App>,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for TestNode {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

pub async fn start_node(cfg: &Config) -> TestNode {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    start_node_on(cfg, listener).await
}

/// A node on a listener bound beforehand (for configs that name each other).
pub async fn start_node_on(cfg: &Config, listener: tokio::net::TcpListener) -> TestNode {
    let addr = listener.local_addr().unwrap();
    let (app, tls) = shoal_node::build(cfg, Some(addr)).unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(shoal_node::serve(
        listener,
        app.clone(),
        tls,
        async {
            let _ = stopped.await;
        },
        Duration::from_secs(1),
    ));
    TestNode {
        addr,
        app,
        stop: Some(stop),
    }
}

/// A node in process for `o`: [`node_toml`]'s config with `node_extra` in `[node]`
/// and `rest` after it.
pub async fn node_for(o: &Origin, node_extra: &str, rest: &str) -> TestNode {
    start_node(&parse(&node_toml(o, node_extra, rest))).await
}

/// Runs `shoal-node` with `args` to its end (a start that must fail, `--help`).
pub fn run_node<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> std::process::Output {
    std::process::Command::new(bin("shoal-node"))
        .args(args)
        .output()
        .expect("run shoal-node")
}

/// Runs `shoal-node --config config` to its end.
pub fn run_node_with(config: &std::path::Path) -> std::process::Output {
    run_node(&[std::ffi::OsStr::new("--config"), config.as_os_str()])
}

/// A client of the node at `addr` signing with the test node key.
pub fn client(addr: std::net::SocketAddr) -> S3Client {
    node_s3_client(&addr.to_string(), NODE_KEY, NODE_SECRET)
}
