//! `shoal-test-origin`: the test origin as a process, for scripts/demo.sh and bench/.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use shoal_testorigin::aws_mock::AwsMock;
use shoal_testorigin::{FaultSettings, Origin, OriginOptions};

/// A real S3 server on loopback (in-memory, SigV4-checked) with a fault mode.
///
/// Fault knobs can be changed while it runs: `curl -X PUT --data '{"first_byte_delay_ms":20}'
/// http://ADDR/_origin/faults`; counters are at `GET /_origin/stats`.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9000")]
    listen: SocketAddr,
    #[arg(
        long,
        env = "SHOAL_ORIGIN_ACCESS_KEY",
        default_value = "shoal-test-key"
    )]
    access_key: String,
    #[arg(
        long,
        env = "SHOAL_ORIGIN_SECRET_KEY",
        default_value = "shoal-test-secret-0123456789",
        hide_env_values = true
    )]
    secret_key: String,
    /// Bucket to create at start (repeatable).
    #[arg(long = "bucket", default_value = "shoal-test")]
    buckets: Vec<String>,
    /// Load every file under DIR into the first bucket, keyed by its relative path.
    #[arg(long, value_name = "DIR")]
    seed: Option<PathBuf>,
    /// Serve HTTPS with this PEM certificate chain (needs --tls-key).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key for --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Write the bound address to this file once listening (for scripts using port 0).
    #[arg(long, value_name = "FILE")]
    addr_file: Option<PathBuf>,
    /// Initial first-byte delay in milliseconds.
    #[arg(long, default_value_t = 0)]
    first_byte_delay_ms: u64,
    /// Initial per-connection bandwidth cap in bytes per second (0 = none).
    #[arg(long, default_value_t = 0)]
    bandwidth: u64,
    /// Also serve the AWS services that hand out this origin's temporary keys
    /// (STS web identity, container credentials, instance metadata) on
    /// 127.0.0.1, and write their URL to FILE.
    #[arg(long, value_name = "FILE")]
    aws_url_file: Option<PathBuf>,
    /// STS takes web identity TOKEN for role ROLE_ARN, whose keys read the
    /// buckets (repeatable; with --aws-url-file).
    #[arg(long, value_name = "TOKEN=ROLE_ARN", requires = "aws_url_file")]
    web_identity: Vec<String>,
    /// How long the AWS services' keys last, in seconds.
    #[arg(long, default_value_t = 3600, requires = "aws_url_file")]
    aws_key_lifetime: u64,
}

fn seed(origin: &Origin, bucket: &str, root: &Path, dir: &Path) -> std::io::Result<u64> {
    let mut n = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            n += seed(origin, bucket, root, &path)?;
        } else {
            let rel = path.strip_prefix(root).expect("under root");
            let key = rel.to_string_lossy().into_owned();
            origin.put(bucket, &key, std::fs::read(&path)?);
            n += 1;
        }
    }
    Ok(n)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let args = Args::parse();
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(c), Some(k)) => {
            let read = |p: &PathBuf| {
                std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))
            };
            Some((read(c)?, read(k)?))
        }
        _ => None,
    };
    let origin = Origin::start(OriginOptions {
        listen: args.listen,
        access_key: args.access_key,
        secret_key: args.secret_key,
        region: "us-east-1".into(),
        buckets: args.buckets.clone(),
        tls,
    })
    .await
    .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    origin.faults.set(FaultSettings {
        first_byte_delay_ms: args.first_byte_delay_ms,
        bandwidth_bytes_per_sec: args.bandwidth,
        ..Default::default()
    });
    if let Some(dir) = &args.seed {
        let n = seed(&origin, &args.buckets[0], dir, dir)
            .map_err(|e| format!("cannot seed from {}: {e}", dir.display()))?;
        eprintln!(
            "seeded {n} objects from {} into {}",
            dir.display(),
            args.buckets[0]
        );
    }
    // Held until the origin stops.
    let _aws = match &args.aws_url_file {
        Some(f) => {
            let aws = AwsMock::start(&origin, Duration::from_secs(args.aws_key_lifetime)).await;
            let buckets: Vec<&str> = args.buckets.iter().map(String::as_str).collect();
            for grant in &args.web_identity {
                let (token, role) = grant
                    .split_once('=')
                    .ok_or_else(|| format!("--web-identity {grant:?} is not TOKEN=ROLE_ARN"))?;
                aws.grant_web_identity(token, role, &buckets);
            }
            std::fs::write(f, aws.url())?;
            eprintln!("AWS services for its keys on {}", aws.url());
            Some(aws)
        }
        None => None,
    };
    if let Some(f) = &args.addr_file {
        std::fs::write(f, origin.addr.to_string())?;
    }
    eprintln!("shoal-test-origin listening on {}", origin.endpoint());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    origin.shutdown().await;
    Ok(())
}
