//! Test harness: the real local origin plus nodes, in process or as processes.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use shoal::config::{
    Addressing, Config, CredentialMode, Credentials, ProcessEnv, RetryPolicy, Timeouts,
};
use shoal::s3::{S3Client, S3ClientOptions};
use shoal_node::App;
use shoal_testorigin::{Origin, OriginOptions};
use tokio::sync::oneshot;

pub const NODE_KEY: &str = "node-client";
pub const NODE_SECRET: &str = "node-client-secret-0123";
pub const BUCKET: &str = "shoal-test";

pub async fn origin() -> Origin {
    Origin::start(OriginOptions::default())
        .await
        .expect("origin")
}

/// A node config for `origin`; `extra` is appended (more sections or keys).
pub fn node_toml(origin: &Origin, node_extra: &str, rest: &str) -> String {
    let o = &origin.options;
    format!(
        r#"[origin]
endpoint = "{endpoint}"
max_attempts = 3
retry_base = "5ms"
retry_max = "50ms"
[origin.credentials]
access_key_id = "{ak}"
secret_access_key = "{sk}"
[node]
listen = "127.0.0.1:0"
{node_extra}
[auth]
[[auth.keys]]
access_key_id = "{NODE_KEY}"
secret_access_key = "{NODE_SECRET}"
{rest}
"#,
        endpoint = origin.endpoint(),
        ak = o.access_key,
        sk = o.secret_key,
    )
}

pub fn parse(toml: &str) -> Config {
    Config::parse(toml, "test.toml", &ProcessEnv).unwrap_or_else(|e| panic!("{e}\n{toml}"))
}

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
    let over = shoal_node::Overrides {
        listen: Some(addr),
        data_dir: None,
    };
    let (app, tls) = shoal_node::build(cfg, &over).unwrap();
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

pub fn client_for(addr: &str, access: &str, secret: &str) -> S3Client {
    S3Client::new(S3ClientOptions {
        endpoint: url::Url::parse(&format!("http://{addr}")).unwrap(),
        region: "us-east-1".into(),
        addressing: Addressing::Path,
        credentials: CredentialMode::Keys(Credentials {
            access_key_id: access.into(),
            secret_access_key: secret.into(),
            session_token: None,
        }),
        timeouts: Timeouts {
            connect: Duration::from_secs(2),
            first_byte: Duration::from_secs(20),
            stall: Duration::from_secs(20),
        },
        retry: RetryPolicy {
            max_attempts: 1,
            base: Duration::from_millis(5),
            max: Duration::from_millis(5),
        },
        // Nodes widen ranges: the range stays out of the signature.
        sign_range: false,
        pool_idle_per_host: 32,
    })
    .unwrap()
}

pub fn client(addr: std::net::SocketAddr) -> S3Client {
    client_for(&addr.to_string(), NODE_KEY, NODE_SECRET)
}

/// Deterministic pseudo-random bytes.
pub fn data(len: usize, seed: u64) -> Bytes {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v.into()
}

/// A metric's value from Prometheus text (`name` with its label block, if any).
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok())?
        })
        .unwrap_or(0.0)
}

pub async fn scrape(addr: std::net::SocketAddr) -> String {
    reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

pub const BIN: &str = env!("CARGO_BIN_EXE_shoal-node");

/// Starts the `shoal-node` binary and waits for its "listening on" line.
pub fn spawn(config: &std::path::Path) -> (std::process::Child, std::net::SocketAddr) {
    use std::io::{BufRead, BufReader};
    let mut child = std::process::Command::new(BIN)
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let _ = tx.send(rest.trim().to_owned());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("node did not start");
    (child, addr.parse().unwrap())
}

/// Sends `sig` (like "-STOP") to a process.
pub fn signal(child: &std::process::Child, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} failed");
}
