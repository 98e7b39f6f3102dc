//! The plugin's `/metrics` (`--metrics-addr`): its own families
//! ([`crate::metrics`]) and, gathered at each scrape, every mount's own
//! (`shoal_mount_*`, `shoal_client_*`), each series labelled with the mount's
//! `volume` and `mount` (its share's path, or its target). A mount serves its
//! page on a Unix socket in its volume's directory (`shoal-mount
//! --metrics-socket`), which the plugin reaches whatever runs the mount: one
//! scrape target per node, no port per mount on the host's network, and a
//! mount's series come and go with it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;

use crate::published::metrics_of;
use crate::Plugin;

/// Longest a mount may take to give its page; past it the scrape goes on
/// without it (and counts it).
const MOUNT_LIMIT: Duration = Duration::from_secs(2);

/// Serves `/metrics` on `addr` until the runtime stops.
pub async fn serve(addr: SocketAddr, plugin: Arc<Plugin>) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let mut registry = Registry::default();
    plugin.metrics.register(&mut registry);
    let registry = Arc::new(registry);
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                continue;
            };
            let (plugin, registry) = (plugin.clone(), registry.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: http::Request<_>| {
                    let (plugin, registry) = (plugin.clone(), registry.clone());
                    async move {
                        let resp = if req.uri().path() == "/metrics" {
                            let accept = req
                                .headers()
                                .get(http::header::ACCEPT)
                                .and_then(|v| v.to_str().ok())
                                .map(str::to_owned);
                            let (ct, body) = page(&plugin, &registry, accept.as_deref()).await;
                            http::Response::builder()
                                .header("content-type", ct)
                                .body(Full::new(Bytes::from(body)))
                        } else {
                            http::Response::builder()
                                .status(404)
                                .body(Full::new(Bytes::from_static(b"not found\n")))
                        };
                        Ok::<_, std::convert::Infallible>(resp.expect("a static response"))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(sock), svc)
                    .await;
            });
        }
    });
    Ok(bound)
}

/// The page: the plugin's families, then the mounts', in the format asked for.
async fn page(
    plugin: &Arc<Plugin>,
    registry: &Registry,
    accept: Option<&str>,
) -> (&'static str, String) {
    let me = plugin.clone();
    let mounts = tokio::task::spawn_blocking(move || me.refresh_metrics())
        .await
        .unwrap_or_default();
    let mut tasks = tokio::task::JoinSet::new();
    for (volume, mount, dir) in mounts {
        let socket = metrics_of(&dir);
        if !socket.exists() {
            // A mount started before mounts served their metrics here.
            continue;
        }
        tasks.spawn(async move {
            let got = tokio::time::timeout(MOUNT_LIMIT, fetch(&socket)).await;
            let page = match got {
                Ok(Ok(p)) => Ok(p),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(format!("no answer within {MOUNT_LIMIT:?}")),
            };
            (volume, mount, socket, page)
        });
    }
    let mut pages = Vec::new();
    while let Some(Ok((volume, mount, socket, got))) = tasks.join_next().await {
        match got {
            Ok(text) => {
                plugin.metrics.mount_scrapes.get_or_create(&ok()).inc();
                pages.push((labels(&volume, &mount), text));
            }
            Err(e) => {
                plugin.metrics.mount_scrapes.get_or_create(&failed()).inc();
                tracing::warn!(
                    "cannot gather the metrics of {mount} ({}): {e}",
                    socket.display()
                );
            }
        }
    }
    // The same order at every scrape.
    pages.sort();
    let own = match shoal::exposition::render(registry, Some("application/openmetrics-text")) {
        Ok((_, text)) => text,
        Err(e) => return ("text/plain", e),
    };
    let merged = merge(&own, &pages);
    if accept.is_some_and(|a| a.contains("application/openmetrics-text")) {
        (shoal::exposition::OPENMETRICS, merged)
    } else {
        (
            shoal::exposition::CLASSIC,
            shoal::exposition::classic(&merged),
        )
    }
}

fn ok() -> crate::metrics::Outcome {
    crate::metrics::Outcome { result: "ok" }
}

fn failed() -> crate::metrics::Outcome {
    crate::metrics::Outcome { result: "failed" }
}

/// `GET /metrics` of the mount on `socket`, in OpenMetrics.
async fn fetch(socket: &Path) -> Result<String, String> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| e.to_string())?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = http::Request::get("/metrics")
        .header(http::header::HOST, "localhost")
        .header(
            http::header::ACCEPT,
            "application/openmetrics-text; version=1.0.0",
        )
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
    if !resp.status().is_success() {
        return Err(format!("it answered {}", resp.status()));
    }
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    String::from_utf8(body.to_vec()).map_err(|e| e.to_string())
}

/// The labels a mount's series get: `volume="…",mount="…"`, escaped.
pub fn labels(volume: &str, mount: &str) -> String {
    let esc = |v: &str| {
        v.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    };
    format!("volume=\"{}\",mount=\"{}\"", esc(volume), esc(mount))
}

/// One family of a page: its metadata lines (`# HELP`, `# TYPE`, `# UNIT`),
/// from the first page that has it, and its samples from every page.
struct Family {
    name: String,
    kind: Option<String>,
    meta: Vec<String>,
    /// The page its metadata came from.
    meta_from: usize,
    samples: Vec<String>,
}

/// `own` (OpenMetrics) with each page's families added, every sample of a page
/// given its labels; each family once, its samples from every page together,
/// as the format wants. A page whose family has another type than the one
/// already seen (mounts of two versions) gives none of its samples to it.
pub fn merge(own: &str, pages: &[(String, String)]) -> String {
    let mut families: Vec<Family> = Vec::new();
    let sources = std::iter::once((None, own))
        .chain(pages.iter().map(|(l, t)| (Some(l.as_str()), t.as_str())));
    for (source, (labels, text)) in sources.enumerate() {
        // The family this page's lines are in, and whether its samples count.
        let mut current: Option<(usize, bool)> = None;
        for line in text.lines() {
            if line.is_empty() || line == "# EOF" {
                continue;
            }
            if let Some(rest) = line.strip_prefix("# ") {
                let mut parts = rest.splitn(3, ' ');
                let (what, name) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                let i = families
                    .iter()
                    .position(|f| f.name == name)
                    .unwrap_or_else(|| {
                        families.push(Family {
                            name: name.to_owned(),
                            kind: None,
                            meta: Vec::new(),
                            meta_from: source,
                            samples: Vec::new(),
                        });
                        families.len() - 1
                    });
                let f = &mut families[i];
                let mut usable = match current {
                    Some((c, u)) if c == i => u,
                    _ => true,
                };
                if what == "TYPE" {
                    let kind = parts.next().unwrap_or("").to_owned();
                    match &f.kind {
                        Some(k) if *k != kind => usable = false,
                        Some(_) => {}
                        None => f.kind = Some(kind),
                    }
                }
                if f.meta_from == source {
                    f.meta.push(line.to_owned());
                }
                current = Some((i, usable));
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let Some((i, true)) = current else { continue };
            let sample = match labels {
                Some(l) => with_labels(line, l),
                None => line.to_owned(),
            };
            families[i].samples.push(sample);
        }
    }
    let mut out = String::new();
    for f in &families {
        for line in f.meta.iter().chain(&f.samples) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push_str("# EOF\n");
    out
}

/// A sample line with `labels` put first among its labels.
fn with_labels(line: &str, labels: &str) -> String {
    let name_end = line.find([' ', '{']).unwrap_or(line.len());
    let (name, rest) = line.split_at(name_end);
    match rest.strip_prefix('{') {
        Some(r) if r.starts_with('}') => format!("{name}{{{labels}{r}"),
        Some(r) => format!("{name}{{{labels},{r}"),
        None => format!("{name}{{{labels}}}{rest}"),
    }
}

/// A mount's volume, where it is, and its directory, for the page.
pub type MountAt = (String, String, PathBuf);

impl Plugin {
    /// Brings the metrics of what the plugin keeps up to date (asking each
    /// mount's keeper its version); the mounts whose pages go with them.
    pub fn refresh_metrics(&self) -> Vec<MountAt> {
        let mounts: Vec<(PathBuf, String, PathBuf)> = self
            .volumes
            .map
            .lock()
            .unwrap()
            .iter()
            .map(|(t, p)| {
                (
                    t.clone(),
                    p.record.fingerprint.volume_id.clone(),
                    p.dir.clone(),
                )
            })
            .collect();
        let binds = self.binds.all();
        let mut volumes: std::collections::BTreeSet<String> = binds
            .iter()
            .map(|b| b.fingerprint.volume_id.clone())
            .collect();
        let shares = mounts
            .iter()
            .filter(|(t, _, _)| t.parent() == Some(self.shares.as_path()))
            .count();
        let mut versions = Vec::new();
        for (target, volume, dir) in &mounts {
            if target.parent() != Some(self.shares.as_path()) {
                volumes.insert(volume.clone());
            }
            let status = crate::condition::keeper_status(&crate::published::control_of(dir));
            let version = status
                .ok()
                .and_then(|s| crate::upgrade::mount_version(&s, self.driver_mount.as_ref()))
                .unwrap_or_else(|| "unknown".into());
            versions.push((volume.clone(), target.display().to_string(), version));
        }
        let stages = binds.iter().filter(|b| b.stage).count();
        self.metrics.set_kept(
            &volumes,
            mounts.len(),
            shares,
            (stages, binds.len() - stages),
        );
        self.metrics.set_versions(
            self.driver_mount.as_ref().map(|d| d.version.as_str()),
            &versions,
        );
        mounts
            .into_iter()
            .map(|(t, v, d)| (v, t.display().to_string(), d))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_family_once_with_every_mounts_samples_labelled() {
        let own = "# HELP shoal_csi_mounts Mounts.\n# TYPE shoal_csi_mounts gauge\nshoal_csi_mounts 2\n# EOF\n";
        let page = |reads: u64| {
            format!(
                "# HELP shoal_mount_reads FUSE reads served.\n# TYPE shoal_mount_reads counter\nshoal_mount_reads_total {reads}\n\
                 # HELP shoal_mount_op_seconds Latency.\n# TYPE shoal_mount_op_seconds histogram\n\
                 shoal_mount_op_seconds_bucket{{op=\"read\",le=\"+Inf\"}} 1\nshoal_mount_op_seconds_count{{}} 1\n# EOF\n"
            )
        };
        let other_type = "# HELP shoal_mount_reads Reads.\n# TYPE shoal_mount_reads gauge\nshoal_mount_reads 9\n# EOF\n";
        let merged = merge(
            own,
            &[
                (labels("vol-a", "/s/1"), page(3)),
                (labels("vol \"b\"", "/s/2"), page(5)),
                (labels("vol-c", "/s/3"), other_type.to_owned()),
            ],
        );
        assert_eq!(
            merged,
            "# HELP shoal_csi_mounts Mounts.\n# TYPE shoal_csi_mounts gauge\nshoal_csi_mounts 2\n\
             # HELP shoal_mount_reads FUSE reads served.\n# TYPE shoal_mount_reads counter\n\
             shoal_mount_reads_total{volume=\"vol-a\",mount=\"/s/1\"} 3\n\
             shoal_mount_reads_total{volume=\"vol \\\"b\\\"\",mount=\"/s/2\"} 5\n\
             # HELP shoal_mount_op_seconds Latency.\n# TYPE shoal_mount_op_seconds histogram\n\
             shoal_mount_op_seconds_bucket{volume=\"vol-a\",mount=\"/s/1\",op=\"read\",le=\"+Inf\"} 1\n\
             shoal_mount_op_seconds_count{volume=\"vol-a\",mount=\"/s/1\"} 1\n\
             shoal_mount_op_seconds_bucket{volume=\"vol \\\"b\\\"\",mount=\"/s/2\",op=\"read\",le=\"+Inf\"} 1\n\
             shoal_mount_op_seconds_count{volume=\"vol \\\"b\\\"\",mount=\"/s/2\"} 1\n# EOF\n"
        );
        // The classic format of it names each counter's series once.
        let classic = shoal::exposition::classic(&merged);
        assert_eq!(
            classic
                .matches("# TYPE shoal_mount_reads_total counter")
                .count(),
            1
        );
    }
}
